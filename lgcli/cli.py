"""The `lg` command line: a thin skin over `lgcli`'s functions.

Conventions every command keeps: stdout carries data (a checkpoint written to
'-', a table, or the --json report) and nothing else; messages and progress
go to stderr; bad input is one line `lg: error: ...` and exit status 1, with
the traceback only under --debug.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

import click
import typer
from rich.console import Console
from rich.table import Table

from . import __version__
from .errors import LgError

app = typer.Typer(
    name="lg",
    help="Resize transformer checkpoints, and grow learngenes into models of any depth and width.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Messages and progress: stderr, so stdout stays clean for data.
err_console = Console(stderr=True, soft_wrap=True)


def out_console() -> Console:
    """A console on the current stdout (tables are data)."""
    return Console(file=sys.stdout, soft_wrap=True)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A message for the user, on stderr."""
    err_console.print(message, highlight=False, markup=False)


def _version_callback(value: bool) -> None:
    if value:
        print(f"lg {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """lg: learngene tools for timm ViTs. Add --debug anywhere for tracebacks."""


HeadsOption = typer.Option(None, "--heads", min=1,
                           help="Number of attention heads, when the file does not record it "
                                "(default: from metadata, else head dim 64).")


@app.command()
def inspect(
    file: str = typer.Argument(..., help="Checkpoint: .safetensors, '-' for stdin, a sharded folder, or .pth/.bin."),
    heads: Optional[int] = HeadsOption,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report instead of a table."),
) -> None:
    """What a checkpoint is, and the exact line that loads it."""
    from .api import inspect_checkpoint

    report = inspect_checkpoint(file, heads=heads)
    if as_json:
        print_json(report)
        return
    render_inspect(report)


def render_inspect(report: dict[str, Any]) -> None:
    table = Table(title=f"{report['file']}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    heads = f"{report['heads']}" + (" (assumed: head dim 64; pass --heads)" if report["heads_assumed"] else "")
    params = report["parameters"]
    rows = [
        ("kind", report["kind"]),
        ("family", report["family"]),
        ("depth", report["depth"]),
        ("width", report["width"]),
        ("heads", heads),
        ("head dim", report["head_dim"]),
        ("mlp dim", report["mlp_dim"]),
        ("patch size", report["patch_size"]),
        ("image size", report["img_size"]),
        ("channels", report["in_chans"]),
        ("classes", report["num_classes"]),
        ("prefix tokens", report["prefix_tokens"]),
        ("pooling", report["pooling"]),
        ("parameters", f"{params['total']:,} (blocks {params['blocks']:,}, embeddings "
                       f"{params['embeddings']:,}, norm {params['norm']:,}, head {params['head']:,})"),
        ("dtypes", ", ".join(f"{k} {v:,}" for k, v in report["dtypes"].items())),
        ("bytes", f"{report['bytes']:,}"),
        ("sha256", report["sha256"]),
    ]
    for step_number, step in enumerate(report["provenance"]):
        label = "made by" if step_number == 0 else "  from"
        desc = step.get("method") or step.get("kind") or "?"
        if step.get("file"):
            desc = f"{step['file']}: {desc}"
        if step.get("options"):
            desc += " " + json.dumps(step["options"], sort_keys=True)
        rows.append((label, desc))
    for name, value in rows:
        table.add_row(name, str(value))
    console = out_console()
    console.print(table, markup=False, highlight=False)
    # Printed plainly so it can be copied as is (rich would wrap it).
    sys.stdout.write("load with:\n  import timm\n  model = " + report["load_call"] + "\n")
    sys.stdout.flush()


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: run the app, turning errors into one line on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or bool(os.environ.get("LG_DEBUG"))
    args = [a for a in args if a != "--debug"]
    try:
        result = app(args=args, prog_name="lg", standalone_mode=False)
    except LgError as exc:
        if debug:
            raise
        _fail(str(exc), 1)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.exceptions.ClickException as exc:
        if debug:
            raise
        hint = ""
        if isinstance(exc, click.exceptions.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        _fail(exc.format_message().replace("\n", " ") + hint, exc.exit_code)
    except BrokenPipeError:
        # The reader went away (e.g. `lg inspect f | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug, or an input we did not foresee
        if debug:
            raise
        _fail(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''} "
              f"(run with --debug for the traceback)", 1)
    if isinstance(result, int) and result:
        sys.exit(result)


def _fail(message: str, code: int) -> None:
    sys.stderr.write(f"lg: error: {message}\n")
    sys.stderr.flush()
    sys.exit(code)


# ---- lg eval (issue 4) ----

def _parse_rates(text: Optional[str]) -> list[float]:
    if not text:
        return []
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise LgError(f"--lr-sweep takes comma-separated learning rates, got {text!r}") from None


@app.command("eval")
def eval_command(
    checkpoints: list[str] = typer.Argument(..., help="Checkpoints to score ('-' for stdin, once)."),
    data: str = typer.Option("fashion-mnist-mini", "--data",
                             help="Image folder (class subfolders; train/ and val/ when present) or a built-in "
                                  "name: fashion-mnist-mini (embedded), fashion-mnist, mnist."),
    subset: Optional[str] = typer.Option(None, "--subset", help="Train images to use: a count or a fraction "
                                                                "(class-balanced, seeded)."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", help="Test images to use: a count or a "
                                                                          "fraction."),
    test_fraction: float = typer.Option(0.2, "--test-fraction", min=0.0, max=0.9,
                                        help="Share of each class held out as the test split of a folder "
                                             "without val/."),
    steps: int = typer.Option(0, "--steps", min=0, help="Fine-tune each checkpoint this many steps first "
                                                        "(the init-quality probe)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Peak learning rate of the probe [default: 3e-4]."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0,
                                         help="Linear warm-up steps before the cosine decay "
                                              "[default: 10% of --steps]."),
    lr_sweep: Optional[str] = typer.Option(None, "--lr-sweep", help="Comma-separated rates: run each and "
                                                                    "report every checkpoint at its best."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Global batch size of the probe."),
    eval_every: int = typer.Option(0, "--eval-every", min=0, help="Score the test split every N steps "
                                                                 "[default: steps/10]."),
    label_smoothing: float = typer.Option(0.0, "--label-smoothing", min=0.0, max=1.0),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="'random': add timm's random "
                                                                    "initialisation of the same architecture."),
    seed: int = typer.Option(0, "--seed", help="Seeds the split, subset, data order and new heads."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (bf16 autocast on CUDA)."),
    heads: Optional[int] = HeadsOption,
    plot: Optional[str] = typer.Option(None, "--plot", help="Write loss and accuracy curves to this PNG."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --plot file."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report instead of a table."),
) -> None:
    """Top-1, top-5 and loss on the test split; with --steps, how fast each checkpoint learns."""
    from .data import load_data
    from .evaluate import DEFAULT_LR, ProbeSettings, evaluate
    from .report import check_plot_path, plot_curves, print_eval_table

    if plot:
        check_plot_path(plot, force=force)
    settings = ProbeSettings(steps=steps, lr=DEFAULT_LR if lr is None else lr,
                             warmup=warmup, lr_sweep=_parse_rates(lr_sweep),
                             batch_size=batch_size, eval_every=eval_every, label_smoothing=label_smoothing,
                             seed=seed, device=device)
    if settings.lr_sweep and lr is not None:
        raise LgError("give --lr or --lr-sweep, not both")
    dataset = load_data(data, subset=subset, test_subset=test_subset, seed=seed, test_fraction=test_fraction)
    report = evaluate(checkpoints, dataset, settings, baseline=baseline, heads=heads, notify=note)
    if plot:
        plot_curves(report, plot, force=force)
        note(f"curves written to {plot}")
    if as_json:
        print_json(report)
    else:
        console = out_console()
        if not console.is_terminal:
            console.width = 200  # a file or pipe: keep rows on one line rather than wrap at 80
        print_eval_table(report, console)


# ---- lg shrink / lg grow (issue 3) ----

_RESIZE_HELP = {
    "depth": "Target number of blocks (default: the source's).",
    "width": "Target embedding width (default: the source's).",
    "heads": "Target attention heads (default: width / the source's head dim).",
    "mlp_dim": "Target MLP hidden size (default: keep the source's MLP ratio).",
    "method": "bot, select, heur-lg, auto-lg, clone, tleg-fit (see docs/methods.md).",
    "output": "Output file, or '-' for stdout.",
}


def _resize_command(direction: str, src: str, output: Optional[str], as_json: bool,
                    force: bool, **kwargs: Any) -> None:
    from .resize import resize_file

    if output is None:
        raise LgError("give an output: -o FILE, or -o - to write the checkpoint to stdout")
    report = resize_file(src, output, direction=direction, force=force, **kwargs)
    if as_json and output != "-":
        print_json(report)
        return
    if as_json:  # stdout carries the checkpoint: the report goes to stderr
        sys.stderr.write(json.dumps(report, indent=2, default=str) + "\n")
        return
    s, t = report["source"], report["target"]
    note(f"{direction} ({report['method']}): depth {s['depth']} -> {t['depth']}, width {s['width']} -> "
         f"{t['width']}, heads {s['heads']} -> {t['heads']}, mlp {s['mlp_dim']} -> {t['mlp_dim']}; "
         f"wrote {report['output']}")


def _register_resize(direction: str, summary: str) -> None:
    @app.command(name=direction, help=summary)
    def command(
        src: str = typer.Argument(..., help="Source checkpoint, or '-' for stdin."),
        depth: Optional[int] = typer.Option(None, "--depth", help=_RESIZE_HELP["depth"]),
        width: Optional[int] = typer.Option(None, "--width", help=_RESIZE_HELP["width"]),
        heads: Optional[int] = typer.Option(None, "--heads", help=_RESIZE_HELP["heads"]),
        source_heads: Optional[int] = typer.Option(
            None, "--source-heads", help="The source's heads, when its file does not record them."),
        mlp_dim: Optional[int] = typer.Option(None, "--mlp-dim", help=_RESIZE_HELP["mlp_dim"]),
        method: str = typer.Option("bot", "--method", help=_RESIZE_HELP["method"]),
        output: Optional[str] = typer.Option(None, "-o", "--output", help=_RESIZE_HELP["output"]),
        seed: int = typer.Option(0, "--seed", help="Seed for random layers (heur-lg, auto-lg)."),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing output."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON report (stderr when -o -)."),
        wavelet: Optional[str] = typer.Option(None, "--wavelet",
                                              help="bot: a pywt discrete wavelet, or auto (default haar)."),
        fit: Optional[str] = typer.Option(None, "--fit", help="bot: interp or crop for non-power-of-two ratios."),
        qkv_axis: Optional[str] = typer.Option(None, "--qkv-axis", help="bot: heads or flat."),
        rescale: Optional[str] = typer.Option(None, "--rescale", help="bot: none (default), std or mean."),
        insert: Optional[str] = typer.Option(None, "--insert", help="clone: interleave or top."),
    ) -> None:
        _resize_command(direction, src, output, as_json, force, depth=depth, width=width, heads=heads,
                        source_heads=source_heads, mlp_dim=mlp_dim, method=method, seed=seed,
                        wavelet=wavelet, fit=fit, qkv_axis=qkv_axis, rescale=rescale, insert=insert)


_register_resize("shrink", "Make a model smaller without training (BoT wavelets by default).")
_register_resize("grow", "Make a model larger without training (BoT wavelets by default).")
