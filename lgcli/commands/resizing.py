"""`lg shrink` and `lg grow`: resize a model by a method, or build one of
any size from a learngene. Their flags include those the methods of their
direction and every learngene kind declare, read from the registries."""

from __future__ import annotations

import inspect as pyinspect
import json
import shlex
import sys
from typing import Any, Callable, Optional, Sequence

import typer

from ..card import HEADS_ASSUMED_NOTE
from ..devices import check_device
from ..errors import counted
from ..options import DEFAULT_SHARD_SIZE, Option, parse_byte_size, parse_count, parse_depth
from .common import (MAX_SEED, METHOD, OUTPUT, SOURCE, TARGET, LgCommand, calibration_plan_text, command_line, note,
                     planned_output, print_json, with_declared_flags)


# ---- lg shrink / lg grow ----

def _resize_owners(direction: str) -> dict[str, Sequence[Option]]:
    """Whose declared options `lg shrink` or `lg grow` takes: the methods of
    that direction (clone grows only), and every learngene kind (a learngene
    is built at any size, whichever command names it)."""
    from ..learngenes import KINDS
    from ..methods import METHODS

    owners: dict[str, Sequence[Option]] = {name: m.options for name, m in METHODS.items()
                                           if m.options and direction in m.directions}
    owners.update({f"{name} learngene": kind.expand_options for name, kind in KINDS.items() if kind.expand_options})
    return owners


def _resize_command(direction: str, src: str, output: Optional[str], as_json: bool,
                    force: bool, dry_run: bool, card: Optional[str], **kwargs: Any) -> None:
    from ..card import CardFacts
    from ..resize import resize_file

    # A plan needs no output (what shape does --params 60M buy?): planned as a stream, which nothing names.
    planned = planned_output(output, dry_run, "-o FILE, or -o - to write the checkpoint to stdout")
    report = resize_file(src, planned, direction=direction, force=force, notify=note, dry_run=dry_run,
                         card=CardFacts(command=command_line()), card_file=card, **kwargs)
    if report.get("budget"):
        note(_budget_summary(report))
    if dry_run:
        _show_plan(report, as_json, output_given=output is not None)
        return
    if as_json and output != "-":
        print_json(report)
        return
    if as_json:  # stdout carries the checkpoint: the report goes to stderr
        sys.stderr.write(json.dumps(report, indent=2, default=str) + "\n")
        return
    note(f"{_resize_summary(report)}; wrote {report['output']}")
    if report.get("load_line"):
        # A Python comment, so that the line still runs as pasted.
        note(f"load with: {report['load_line']}" + (HEADS_ASSUMED_NOTE if report.get("heads_assumed") else ""))
        # A resized model is a starting point, not a finished one (the card says so too).
        if report.get("scored_by_lg", True):
            note(f"this is an initialisation to fine-tune, not a finished model; score it on your data (--data) "
                 f"or on lg's{_score_hint(report)}")
        else:
            note(f"this is an initialisation to fine-tune, not a finished model: fine-tune it with "
                 f"{report['fine_tune']} (lg eval scores image classifiers and language models; this model has "
                 f"no head to score)")


def _score_hint(report: dict[str, Any]) -> str:
    """How lg eval scores a written model (": lg eval ..."): a language model as it
    is (held-out perplexity, no training: a training probe of a real LLM on
    a CPU takes hours), an image model after a 100-step probe. Where that
    probe would run on the CPU and the model is large (`pace.probe_seconds` over `pace.SLOW_PROBE_SECONDS`),
    a classifier of the data's classes is scored as it is, and any other is
    said to take long. Heads the file does not record (lg assumed them) are
    given with --heads, as lg eval asks, at the count the load line builds,
    and said to be assumed."""
    from ..text import builtin_texts

    text = report["try_data"] in builtin_texts()
    cpu = report.get("cpu_probe") or {}
    as_it_is = text or (cpu.get("slow") and cpu.get("as_it_is"))
    assumed = report.get("heads_assumed")
    heads = f" --heads {report['target']['heads']}" if assumed else ""
    why = ("held-out perplexity; --steps N trains a probe first" if text else
           "top-1 on the test split; a --steps 100 probe of a model this size is long on the CPU")
    long = (" after a probe of 100 training steps (long on the CPU for a model this size: lg eval says how long "
            "after its first 20)") if cpu.get("slow") and not as_it_is else ""
    return ((f" as it is ({why})" if as_it_is else long)
            + (" with the heads lg assumed (give the model's own to --heads)" if assumed else "")
            + f": lg eval {shlex.quote(report['output'])}{heads} --data {report['try_data']} "
              f"--steps {0 if as_it_is else 100}")


def _budget_summary(report: dict[str, Any]) -> str:
    """The shape a --params or --memory budget chose, in words."""
    budget, t = report["budget"], report["target"]
    flag = "--memory" if budget["unit"] == "bytes" else "--params"
    used = f"{budget['parameters']:,} parameters" + (f", {budget['bytes']:,} bytes" if "bytes" in budget else "")
    kv = f", {counted(t['kv_heads'], 'key/value head')}" if t["kv_heads"] != t["heads"] else ""
    depth = ",".join(str(s["depth"]) for s in t["stages"]) if "stages" in t else t["depth"]
    return (f"{flag} {budget['budget']:,}: chose depth {depth}, width {t['width']} ({counted(t['heads'], 'head')}{kv}, "
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
    # Grouped-query attention on either side: its key/value heads, which
    # --kv-heads changes alone (the parameters change, the heads do not).
    grouped = s.get("kv_heads", s["heads"]) != s["heads"] or t.get("kv_heads", t["heads"]) != t["heads"]
    kv = f", kv heads {s['kv_heads']} -> {t['kv_heads']}" if grouped else ""
    return (f"{made}: depth {s['depth']} -> {t['depth']}, width {s['width']} -> {t['width']}, heads {s['heads']} -> "
            f"{t['heads']}{assumed}{kv}, mlp {s['mlp_dim']} -> {t['mlp_dim']}")


def _show_plan(plan: dict[str, Any], as_json: bool, output_given: bool = True) -> None:
    """A resize's --dry-run plan: in words on stderr, as JSON on stdout with
    --json (without -o, the output it would write is not part of it)."""
    from ..checkpoint.memory import memory_text

    out = plan["output"]
    where = {"stream": " to stdout", "file": f" as one file at {out['path']}",
             "folder": f" as a model folder at {out['path']}",
             "shards": f" as a folder of {out['safetensors_files']} shards at {out['path']}"}[out["form"]]
    note(f"dry run, nothing written: {_resize_summary(plan)}; {plan['parameters']['target']:,} parameters, "
         f"{out['tensor_bytes']:,} bytes of {out['dtype']} weights{where if output_given else ''}; "
         f"the transforms' peak memory about {memory_text(plan['peak_memory_bytes'])} (three copies of the largest "
         f"role stack), beyond what the process holds to read the model")
    if "calibration" in plan:
        note(calibration_plan_text(plan["calibration"], "the shrink runs"))
    if not output_given:
        plan = {**plan, "output": {k: v for k, v in out.items() if k not in ("path", "form")}}
    if as_json:
        print_json(plan)


DryRunOption = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT,
                            help="Print the plan (sizes, parameters, bytes, peak memory; --json: as JSON on stdout) "
                                 "and write nothing.")

# The options `lg condense` and `lg distill` share: the same training loop,


RESIZE_SUMMARIES = {
    "shrink": "Make a model smaller without training (weight selection by default), or build a model of any size "
              "from a learngene.",
    "grow": "Make a model larger without training (by default keeping its function: clone, or Auto-LG where "
            "clone cannot reach the size), or build a model of any size from a learngene.",
}


def _resize_methods(direction: str) -> tuple[str, ...]:
    """The methods `lg shrink` or `lg grow` takes, as --method lists them
    (the default first): the methods registry's own list."""
    from ..methods import RESIZE_METHODS

    return RESIZE_METHODS[direction]


def _default_text(direction: str, methods: tuple[str, ...]) -> str:
    """`clone (the default; auto-lg where it cannot reach the size)`: the
    default --method and, where the direction has one, its fallback."""
    if not methods:
        return "the default"
    from ..calibrated_shrink import DEPTH_METHOD, WIDTH_METHOD
    from ..methods import FALLBACK_METHODS, SHRINK

    fallback = FALLBACK_METHODS.get(direction)
    notes = f"; {fallback} where it cannot reach the size" if fallback else ""
    if direction == SHRINK:
        notes += f"; with --calibrate, {DEPTH_METHOD} for the depth and {WIDTH_METHOD} for the width"
    return f"{methods[0]} (the default{notes})"


def register_resize(app: typer.Typer, direction: str, declared: bool) -> None:
    """Add `lg shrink` or `lg grow` to the app. `declared`: whether it is the
    command about to run, the one case where the registries are imported,
    for the flags their methods and kinds declare and the --method list."""
    _register_resize(app, direction, RESIZE_SUMMARIES[direction], _resize_owners(direction) if declared else {},
                     _resize_methods(direction) if declared else ())


def _register_resize(app: typer.Typer, direction: str, summary: str, owners: dict[str, Sequence[Option]],
                     methods: Sequence[str]) -> None:
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
            help=f"{_default_text(direction, methods)}, {', '.join(methods[1:])} "
                 f"(docs/methods.md; the default was measured by lg bench). For a learngene, only one of trained "
                 f"widths (TLEG, SWS and LeTs, of one width or several; WAVE condensed with --widths; none of a "
                 f"Swin), and only to reach a width it was not trained at: its nearest trained width is built, then "
                 f"resized by this method. Other learngenes build every size by their own rule and refuse it."),
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
        # A device lg does not run on (meta, mps) or one this machine lacks is
        # refused as lg eval and lg condense refuse it, before any work: the
        # dry run too.
        check_device(options.get("device"))
        if method is not None:  # an unknown one is a usage mistake, said before the output is checked
            from ..methods import get_method

            get_method(method)
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


# lg shrink's flags that give a budget instead of sizes (`budget.budget_shape`).
BUDGET_FLAGS = ("params", "memory")


def _memory_budget(text: str) -> int:
    """--memory's bytes: a budget, so 0 is no size (not --shard-size's "no limit")."""
    return parse_byte_size(text, "--memory", examples="200MB or 1GiB", zero=None)
