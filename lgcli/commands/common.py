"""What the `lg` commands share: help that names values as a user writes
them (`LgCommand`), the help panels, the consoles (stdout for data, stderr
for messages), the options several commands take, the flags methods and
learngene kinds declare, and the command line being run (a model card
records it; an interrupted run's hint repeats it)."""

from __future__ import annotations

import inspect as pyinspect
import json
import os
import shlex
import sys
from typing import Any, Callable, NoReturn, Optional, Sequence

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup

from ..errors import UsageError, counted, one_line
from ..options import Option, merge_declarations

# Seeds feed torch, numpy and Python generators: 0 .. 2**32 - 1 suits all.
MAX_SEED = 2**32 - 1

# The command line being run, and what an interrupted command can add about
# continuing it (lg condense: the training checkpoint and --resume).
invocation: list[str] = []
resume_hints: list[Callable[[], str]] = []
# Set by a command whose finished files are parts of its output (lg bench: each learngene, each cell, as it
# lands): an interrupt after one is not "after the output was written in full"; its resume hint says what is kept.
writes_parts: list[bool] = []


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


def reader_gone() -> NoReturn:
    """stdout's reader went away (`lg methods | head`): no error, exit
    status 0. What is left to write goes to /dev/null (a flush at exit
    would fail again). Said here, where lg writes its data: click, around
    every command, exits 1 for the EPIPE it catches, and rich's console too."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(0)


def write_data(text: str) -> None:
    """`text` on stdout, flushed (a reader gone: `reader_gone`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


class _DataConsole(Console):
    """rich's Console for data on stdout, its reader gone no error (`reader_gone`)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        reader_gone()


def out_console() -> Console:
    """A console on the current stdout (tables are data)."""
    return _DataConsole(file=sys.stdout, soft_wrap=True)


def table_console() -> Console:
    """A console for a table that fits its width (lgcli.tables): the
    terminal's, or COLUMNS; a file or pipe without COLUMNS gets 200 columns,
    so that rows stay on one line."""
    console = out_console()
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console.width = 200
    return console


def print_json(obj: Any) -> None:
    write_data(json.dumps(obj, indent=2, default=str) + "\n")


def note(message: str) -> None:
    """A message for the user, on stderr: one line, whatever it embeds."""
    err_console.print(one_line(message), highlight=False, markup=False)


HeadsOption = typer.Option(None, "--heads", min=1, metavar="N",
                           help="Number of attention heads, when the file does not record it "
                                "(default: from metadata, else head dim 64).")


def stages_text(stages: list[dict[str, Any]]) -> str:
    """A model of stages' sizes on one line: depths 2,2,6,2, widths ..., heads ..."""
    return ", ".join(f"{label} {','.join(str(stage[key]) for stage in stages)}"
                     for label, key in (("depths", "depth"), ("widths", "width"), ("heads", "heads")))


def shape_text(sizes: dict[str, Any]) -> str:
    """A report's sizes (`spec_sizes`) in a message: depth x width, or per stage."""
    return stages_text(sizes["stages"]) if sizes.get("stages") else f"{sizes['depth']} x {sizes['width']}"


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
                            rich_help_panel=next((o.panel for _, o in takers if o.panel), None)
                            or f"Options of {', '.join(owner_names)}", show_default=False)
        parameters.append(pyinspect.Parameter(name, pyinspect.Parameter.KEYWORD_ONLY, default=info,
                                            annotation=Optional[option.type]))
    return parameters


# Metavars of declared options that name what a value is (by option name: the
# same name means the same kind of value in every method and kind).
DECLARED_METAVARS = {"data": "DATA", "teacher": "CKPT", "lr": "RATE", "subset": "N|F",
                     "device": "auto|cpu|cuda[:N]", "wavelet": "NAME", "depths": "LIST", "templates": "LIST",
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


def command_line() -> str:
    """The lg command being run, as typed (a model card records it)."""
    return shlex.join(["lg", *invocation])


def refuse_binary_on_terminal(output: str) -> None:
    """`-o -` onto a terminal would print binary safetensors there (and
    scramble it): refused before any work, as gzip and zstd do."""
    if output == "-" and sys.stdout.isatty():
        raise UsageError("-o - writes a binary checkpoint to stdout, which is a terminal: pipe it into a command "
                         "(| lg inspect -) or redirect it (> FILE)")


def planned_output(output: Optional[str], dry_run: bool, how: str) -> str:
    """The output to write (refused on a terminal when binary), or for a
    --dry-run without one, a stream that nothing names: a plan needs none."""
    if output is None:
        if not dry_run:
            raise UsageError(f"give an output: {how}")
        return "-"
    refuse_binary_on_terminal(output)
    return output


def calibration_plan_text(calibration: dict[str, Any], when: str) -> str:
    """A dry run's calibration passes in words (`lg shrink --calibrate`'s,
    `lg bench`'s data-aware cells'): the examples checked, the passes `when`
    they run, and their time from one batch timed; at most that where
    blocks are skipped (block ablation), as a skipping pass replays only
    the blocks after the skipped one (and a shrink's second step, which
    follows a depth step, runs on the shallower model)."""
    from ..pace import duration_text

    passes, skipping = calibration["passes"], calibration["passes_skipping_blocks"]
    how_long = f"{'at most ' if skipping else ''}about {duration_text(calibration['estimated_seconds'])}"
    skipped = f" ({skipping} with blocks skipped)" if skipping else ""
    return (f"calibration data checked ({calibration['samples']} examples of {calibration['data']}); "
            f"{counted(passes, 'pass')} over them when {when}{skipped}: {how_long}, from one batch timed")


def show_training_plan(what: str, plan: dict[str, Any], as_json: bool, timed: str) -> None:
    """A --dry-run plan of training steps: in words on stderr (the time the
    `timed` steps give), as JSON on stdout with --json. A plan's
    `calibration` (lg bench's data-aware cells' passes) and `scoring` (lg
    distill's held-out figures) are in its `estimated_seconds`, and said by
    their commands, not in the training's time said here."""
    from ..train import duration_text

    # A slow model times fewer steps than a fast one (lgcli.train.seconds_per_step).
    steps = counted(plan["timed_steps"], "timed step") if "timed_steps" in plan else "timed steps"
    timed_batch, batch = plan.get("timed_batch_size"), plan.get("batch_size")
    if timed_batch and batch and timed_batch != batch:  # a slow model is timed on a smaller batch: say so
        steps = (counted(plan["timed_steps"], "step") if "timed_steps" in plan else "steps") + \
            f" timed at batch {timed_batch}, scaled to batch {batch}:"
        timed = f"{plan['seconds_per_step']:.3f} s a step"
    training = plan["estimated_seconds"] - sum(plan.get(part, {}).get("estimated_seconds", 0.0)
                                               for part in ("calibration", "scoring"))
    took = (f"about {duration_text(max(training, 0.0))} of training on {plan['device']} (from "
            f"{steps} {timed})") if plan["steps"] else "nothing to train"
    at_most = " at most" if plan.get("until") else ""
    note(f"dry run, nothing written: {what}; {plan['steps']:,} training steps{at_most}: {took}")
    if as_json:
        print_json(plan)
