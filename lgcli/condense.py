"""Condense a teacher into a learngene: what `lg condense` does, as functions.

    >>> from lgcli.condense import CondenseSettings, condense_file
    >>> report = condense_file("vit.safetensors", "tleg.lg.safetensors", method="tleg", data="fashion-mnist-mini",
    ...                        settings=CondenseSettings(steps=600))

The teacher is frozen and only its logits are used. The auxiliary model (the
teacher's family configuration at `aux_depth` x `aux_width`, with the
teacher's input size and classes) is a stock model whose weights the kind
builds from its learngene tensors on every step (`GeneratedModel`); those
tensors train through the one loop, `lgcli.train.train`, with the teacher's
logits as the loss's extra input. Under torchrun every process runs the same
call and rank 0 writes the file.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Mapping

from .learngene_files import is_learngene, load_learngene, save_learngene
from .outputs import checked_output
from .loading import build_model, load
from .inspection import grow_hint
from .arch import get_adapter
from .checkpoint import STDIO, Checkpoint, check_source, read_checkpoint
from .arch.base import IMAGE_CLASSIFICATION
from .checks import check_real, check_whole
from .images import ImageData
from .errors import LgError, UsageError, counted, notify_stderr
from .fitting import data_for
from .lazy import torch
from .learngenes import Learngene, get_kind
from .learngenes.base import depths_text, starts_from_ancestry
from .learngenes.widths import summed_over_widths
from .options import DEFAULT_CONDENSE_BATCH_SIZE, DEFAULT_CONDENSE_STEPS, resolve_options
from .preprocessing import PREPROCESSING, Overrides, attach, overridden
from .recipe import preprocessing_of
from .sizing import check_heads_known, spec_sizes, target_spec
from .stack import ArchSpec, Stack
from .text import TextData, check_data_source, evaluate_text
from .accuracy import evaluate_accuracy
from .devices import auto_device_note, concrete_device, distributed_setup
from .heads import model_input
from .losses import distillation_loss
from .run_settings import RunSettings
from .stopping import StoppingRule, hold_out, unit_of
from .train import StepCallback, TrainConfig, check_checkpoint_path, check_resume, seconds_per_step, train

if TYPE_CHECKING:
    from .learngenes.generated import GeneratedModel

Notify = Callable[[str], None]
# Images held out to score the auxiliary model when --test-fraction is not given.
DEFAULT_CONDENSE_IMAGE_TEST_FRACTION = 0.2


@dataclass
class CondenseSettings(RunSettings):
    """The training run of a condense (the kind's own options are separate):
    its steps (or epochs), batch and rate, and the training run's shared
    settings (`run_settings.RunSettings`: warm-up, by default 5 % of the steps,
    weight decay, seed, device, checkpoint, --until, whose patience is
    `lgcli.stopping.UNTIL_PATIENCE` checks).

    Checked when constructed, with the messages the CLI's flags would get:
    `lr` finite and > 0, `weight_decay` finite and >= 0, `batch_size` >= 1,
    `epochs` finite and > 0, `seed` a whole number in [0, 2**32 - 1]."""

    steps: int | None = None  # optimiser steps; or give epochs; neither: DEFAULT_CONDENSE_STEPS
    epochs: float | None = None
    batch_size: int = DEFAULT_CONDENSE_BATCH_SIZE
    lr: float = 1e-3
    batch_flag: str = "--batch-size"  # the option that set batch_size (lg bench: --condense-batch-size)

    def check(self) -> None:
        if self.steps is not None:
            check_whole(self.steps, "--steps", 1)
        if self.epochs is not None:
            check_real(self.epochs, "--epochs", "a positive finite number", lambda v: v > 0)
        check_whole(self.batch_size, self.batch_flag, 1)
        check_real(self.lr, "--lr", "a positive finite number", lambda v: v > 0)
        super().check()

    def total_steps(self, train_images: int) -> int:
        if self.steps is not None and self.epochs is not None:
            raise UsageError("give --steps or --epochs, not both")
        if self.steps is not None:
            if self.steps < 1:
                raise UsageError(f"--steps must be at least 1, not {self.steps}")
            return int(self.steps)
        if self.epochs is None:
            return DEFAULT_CONDENSE_STEPS
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise UsageError(f"--epochs must be a positive number, not {self.epochs}")
        steps = self.epochs * train_images / self.batch_size
        if not steps <= 2**53:  # also catches inf from an overflowing product
            raise UsageError(f"--epochs {self.epochs:g} makes more optimiser steps than any run can take")
        return max(1, math.ceil(steps))


def condense(teacher: str | os.PathLike | Checkpoint, data: ImageData | TextData | str | None, *, method: str,
             aux_depth: int | None = None, aux_width: int | None = None, aux_heads: int | None = None,
             settings: CondenseSettings | None = None, options: Mapping[str, Any] | None = None,
             teacher_heads: int | None = None, notify: Notify = notify_stderr, on_step: StepCallback | None = None,
             stdin: BinaryIO | None = None, subset: str | None = None, test_subset: str | None = None,
             test_fraction: float | None = None, seq_len: int | None = None, dry_run: bool = False,
             preprocessing: Overrides | None = None,
             ) -> tuple[Learngene | None, Checkpoint, dict[str, Any]]:
    """Distil `teacher` into a learngene of kind `method` on `data`. Returns the
    learngene, the teacher's checkpoint (its provenance) and a JSON-ready report.

    `data` is what the teacher's model takes: images of its classes (an
    `ImageData`, or a folder or built-in name), or text for a language
    model (a `TextData`, or a file, folder or built-in text, tokenized with
    the teacher's tokenizer.json, cut into windows of `seq_len` tokens).
    `subset`, `test_subset` and `test_fraction` apply when it is read here.
    Images are prepared as the teacher wants them (`lgcli.preprocessing`),
    `preprocessing` (--mean, --std, --interpolation) over it; the learngene
    records it for its descendants. A training-free kind (PEG) is sampled instead; `data`, when given, then
    scores the learngene (see `_sample`).

    `dry_run`: everything is read and checked, a few steps are timed on a
    model thrown away (`train.seconds_per_step`), and the plan (`_plan`)
    comes back in place of the learngene, which is None."""
    started = time.perf_counter()
    settings = settings or CondenseSettings()
    # A mistyped path is said before torch or a device is paid for.
    if not isinstance(teacher, Checkpoint):
        check_source(teacher)
    check_data_source(data)
    device_note = auto_device_note(settings.device)
    settings = dataclasses.replace(settings, device=concrete_device(settings.device))
    kind = get_kind(method)
    resolved = resolve_options(f"learngene kind '{kind.name}'", kind.condense_options, options or {})
    reading = {"subset": subset, "test_subset": test_subset, "test_fraction": test_fraction, "seq_len": seq_len}
    if not kind.trains:
        return _sample(kind, resolved, teacher, data, settings, teacher_heads=teacher_heads, notify=notify,
                       stdin=stdin, started=started, reading=reading, overrides=preprocessing)
    if data is None:
        raise UsageError(f"give the data to distil on: --data D (a {kind.name} learngene is trained)")
    # The kind's declared alpha and tau (SPEC.md "TLEG", WAVE Eq. 6); refuses
    # bad loss settings before any work.
    loss_fn = distillation_loss(resolved["alpha"], resolved["tau"])
    checkpoint = teacher if isinstance(teacher, Checkpoint) else read_checkpoint(teacher, stdin=stdin)
    loaded = _load_teacher(checkpoint, teacher_heads, "teacher", preprocessing)
    kind = get_kind(method, loaded.spec)  # per stage for a model of stages
    aux = target_spec(loaded.spec, depth=aux_depth, width=aux_width, heads=aux_heads,
                      heads_flag="--aux-heads")
    warm, ancestry, aux_init, generator = _start(loaded, aux, resolved, settings.seed)
    widths, importance, statistics = kind.training_widths(aux, resolved), None, None
    measures = kind.teacher_measure(resolved)
    if measures and not warm:
        raise UsageError(f"{measures} maps descendants onto the teacher's layers, so condensing must start from "
                         f"them: give --init ancestry at the teacher's width, or drop {measures.split()[0]}")
    # One pass over the teacher serves both; a dry run makes none (neither the
    # channels' order nor the stage map changes what a step costs).
    if warm and (widths or measures) and not dry_run:
        statistics = teacher_statistics(loaded, ancestry, data, seed=settings.seed, device=settings.device,
                                        seq_len=seq_len, notify=notify)
    if statistics is not None and widths:  # nested slices keep the first channels: put the most important first
        ancestry, importance = importance_ordered(loaded, ancestry, data, seed=settings.seed,
                                                  device=settings.device, seq_len=seq_len, notify=notify,
                                                  statistics=statistics)
    measured = {} if statistics is None or not measures else kind.measured_sizes(aux, loaded.spec, resolved,
                                                                                    statistics)
    sizes = {**kind.sizes(aux, resolved), **measured}  # what the file records, and what builds read
    if measured:
        notify(f"condense {kind.name}: {kind.measured_note(measured)}")
    trainable, frozen = kind.initial(aux, aux_init, resolved, generator, ancestry=ancestry)
    from .learngenes.generated import GeneratedModel  # an nn.Module: torch is imported here

    width_rule = resolved.get("width_rule", "sample")
    model = GeneratedModel(aux, kind.builder(sizes), trainable, frozen, kind.no_weight_decay,
                           depths=kind.training_depths(aux, resolved), widths=widths, width_rule=width_rule)
    # --width-rule widest / sandwich: a step's loss is the sum over the widths it builds.
    loss_fn = summed_over_widths(loss_fn, model.passes_per_step)
    teacher_model = build_model(loaded.spec, loaded.stack)
    # Both see the same batches, prepared as the teacher wants them.
    attach(model, loaded.spec.extras.get(PREPROCESSING))
    if model.task == IMAGE_CLASSIFICATION:
        # A family lg cannot train refuses here, in one line, before its
        # classes are compared with the data's (a model of features has none).
        model_input(teacher_model)
    dataset = _read_data(model, data, checkpoint, "the teacher", settings, reading, notify)
    held_out = None
    if settings.until is not None:
        dataset, held_out = hold_out(dataset, settings.seed)
    steps = settings.total_steps(len(dataset.train))
    if len(dataset.train) < settings.batch_size:
        raise LgError(f"the train split has {len(dataset.train)} {unit_of(dataset)}, fewer than one batch of "
                      f"{settings.batch_size} (lower {settings.batch_flag})")

    config = TrainConfig(steps=steps, batch_size=settings.batch_size, batch_flag=settings.batch_flag, lr=settings.lr,
                         weight_decay=settings.weight_decay,
                         warmup_steps=settings.warmup if settings.warmup is not None else steps // 20,
                         seed=settings.seed, device=settings.device, checkpoint_path=settings.checkpoint,
                         checkpoint_every=settings.checkpoint_every, resume=settings.resume, force=settings.force,
                         progress=settings.progress, description=f"condensing {kind.name}",
                         callback_every=1 if on_step is not None else settings.until_every,
                         origin=_run_origin(checkpoint, loaded.spec, kind.name, aux, resolved, dataset, reading,
                                            settings) if settings.checkpoint else {})
    check_checkpoint_path(config)
    check_resume(config, stateful=held_out is not None)  # a --resume refused in one line, before the plan below
    preprocessing_of(loaded, notify=notify)  # says when it is assumed, once the run is known to go ahead
    if dry_run:
        per_step, timed = seconds_per_step(model, dataset.train, config, loss_fn=loss_fn, teacher=teacher_model)
        learngene_parameters = sum(t.numel() for t in kind.keep(model.trained_tensors()).values())
        return None, checkpoint, _plan(kind.name, spec_sizes(loaded.spec), spec_sizes(aux), steps, settings,
                                       learngene_parameters, loaded.stack.num_parameters(), per_step, timed)
    heads = "" if aux.stages else f" ({counted(aux.heads, 'head')})"
    start = "started from the teacher" + kind.warm_start_note(aux, loaded.spec, resolved) if warm \
        else "from random weights"
    notify(f"condense {kind.name}: teacher {_sizes(loaded.spec)}, auxiliary model {_sizes(aux)}{heads}, "
           f"{counted(steps, 'step')} of {settings.batch_size}, {start}")
    if device_note:
        notify(device_note)
    rule = None if held_out is None else StoppingRule(settings.until, settings.until_every, held_out, teacher_model,
                                                         settings.device, notify)
    callback = on_step if rule is None else rule.wrap(on_step)
    result = train(model, dataset.train, config, loss_fn=loss_fn, teacher=teacher_model, on_step=callback,
                   on_step_state=rule)
    model.eval()
    # What the file records is what the run computed: no wall time, so the
    # same command and seed write the same bytes (the report has the time).
    condensed = {"steps": result.steps, "data": dataset.describe(),
                 **_scores(model, teacher_model, dataset, settings.device)}
    if rule is not None:
        condensed["until"] = rule.report(result.steps, steps)
    if importance is not None:  # the data the channels were ordered on (widths.importance_ordered)
        condensed["importance_order"] = importance
    model.cpu()
    seconds = time.perf_counter() - started
    window = max(1, min(20, len(result.losses) // 5))
    learngene = Learngene(kind=kind.name, spec=aux, tensors=kind.keep(model.trained_tensors()),
                          sizes=sizes, condensed=condensed)
    if "init" in resolved:  # what auto chose, so the file says how it was made
        resolved = {**resolved, "init": "ancestry" if warm else "random"}
    if "depths" in resolved and model.depths:  # the depths trained (a range or a list), the default one included
        resolved = {**resolved, "depths": depths_text(model.depths)}
    if widths:
        resolved = {**resolved, "widths": ",".join(map(str, widths))}
    else:  # no --widths: the file records what it did before --width-rule and --width-norms existed
        resolved = {k: v for k, v in resolved.items() if k not in ("width_rule", "width_norms")}
    recorded = {"aux_depth": aux.depth, "aux_width": aux.width, "aux_heads": aux.heads, **resolved,
                **{k: v for k, v in asdict(settings).items()
                   if k in ("batch_size", "lr", "weight_decay", "seed")},
                "steps": steps, "warmup": config.warmup_steps,
                **({"until": settings.until, "until_every": settings.until_every} if rule is not None else {})}
    report = {"command": "condense", "method": kind.name, "options": recorded, "teacher": spec_sizes(loaded.spec),
              "auxiliary": spec_sizes(aux), "passes_per_step": model.passes_per_step,
              "parameters": {"teacher": loaded.stack.num_parameters(), "learngene": learngene.num_parameters()},
              "loss_first": sum(result.losses[:window]) / window if result.losses else None,
              "loss_last": sum(result.losses[-window:]) / window if result.losses else None,
              "resumed_from": result.resumed_from, "seconds": round(seconds, 1), **condensed}
    return learngene, checkpoint, report


def _start(loaded, aux: ArchSpec, resolved: Mapping[str, Any], seed: int,
           ) -> tuple[bool, Stack | None, Stack, torch.Generator]:
    """Where condensing starts: whether from the teacher's weights (`--init`,
    when they fit the auxiliary model), those weights, the auxiliary model's
    weights the kind starts from, and the run's seeded generator."""
    warm = "init" in resolved and starts_from_ancestry(resolved["init"], aux, loaded.spec)
    ancestry = loaded.stack.materialized() if warm else None
    # A warm start needs no random model of the auxiliary size (its roles are the teacher's).
    aux_init = ancestry if warm else get_adapter(loaded.spec.family).random_stack(aux, seed=seed)
    return warm, ancestry, aux_init, torch.Generator().manual_seed(seed)


def unstarted_learngene(loaded, method: str, *, seed: int = 0,
                        options: Mapping[str, Any] | None = None) -> Learngene:
    """The learngene `condense` of the loaded teacher starts from with these
    options, before any step and without data: its tensors on the meta
    device (their shapes, no memory) and its sizes. What it can build is then
    known before the run is paid for (`lg bench` condenses no kind that
    reaches none of its sizes). A training-free kind (PEG) has no such start."""
    start = starting_learngene(loaded, method, seed=seed, options=options, measured=False)
    return Learngene(kind=start.kind, spec=start.spec, sizes=start.sizes,
                     tensors={name: tensor.to("meta") for name, tensor in start.tensors.items()})


def starting_learngene(loaded, method: str, *, seed: int = 0,
                       options: Mapping[str, Any] | None = None, measured: bool = True) -> Learngene:
    """`unstarted_learngene` with its tensors' values: what condensing's first
    step trains (from the teacher where `--init` starts there), so that a
    learngene can be grown and scored before any training
    (benchmarks/real/sws_start.py). A kind whose start is measured on data
    (SWS's --stage-map) is refused, unless `measured` is False (its shapes
    alone are asked for: they are the same)."""
    kind = get_kind(method, loaded.spec)
    if not kind.trains:
        raise LgError(f"a {kind.name} learngene is sampled, not trained: it has no unstarted form")
    resolved = resolve_options(f"learngene kind '{kind.name}'", kind.condense_options, options or {})
    aux = target_spec(loaded.spec)
    # The checks `condense` makes before its kind's first tensors, in its
    # order: a kind that cannot condense this teacher refuses as it would there.
    kind.training_widths(aux, resolved)
    kind.training_depths(aux, resolved)
    if measured and (flag := kind.teacher_measure(resolved)):
        raise UsageError(f"a {kind.name} learngene with {flag} starts from what condensing measures on its data: "
                         f"condense it (lg condense --data D)")
    _, ancestry, aux_init, generator = _start(loaded, aux, resolved, seed)
    trainable, frozen = kind.initial(aux, aux_init, resolved, generator, ancestry=ancestry)
    return Learngene(kind=kind.name, spec=aux, tensors=kind.keep({**trainable, **frozen}),
                     sizes=kind.sizes(aux, resolved))


def _run_origin(checkpoint: Checkpoint, teacher: ArchSpec, kind: str, aux: ArchSpec, options: Mapping[str, Any],
                dataset: ImageData | TextData, reading: Mapping[str, Any],
                settings: CondenseSettings) -> dict[str, Any]:
    """What a condense run is made from, as its training checkpoint records
    it: a --resume of a checkpoint made from anything else (another teacher,
    data, kind, auxiliary shape or option) is refused, saying what differs
    (`lgcli.train` compares them). The step settings (steps, batch, rate,
    seed) are the training run's own, compared there too."""
    import json

    origin = {"teacher_sha256": checkpoint.sha256, "teacher": spec_sizes(teacher), "kind": kind,
              "auxiliary": spec_sizes(aux), "options": dict(options), "data": dataset.describe(),
              "reading": dict(reading), "until": settings.until, "until_every": settings.until_every}
    return json.loads(json.dumps(origin, default=str))  # plain values: a weights_only load reads them


def _plan(kind: str, teacher: dict[str, int], aux: dict[str, int], steps: int, settings: CondenseSettings,
          learngene_parameters: int, teacher_parameters: int, per_step: float, timed: int) -> dict[str, Any]:
    """What `lg condense --dry-run` reports: the run's sizes and steps, and
    its training time estimated from `timed` steps of `per_step` seconds."""
    return {"dry_run": True, "command": "condense", "method": kind, "teacher": teacher,
            "auxiliary": aux, "parameters": {"teacher": teacher_parameters, "learngene": learngene_parameters},
            "steps": steps, "batch_size": settings.batch_size, "until": settings.until, "device": settings.device,
            "timed_steps": timed, "seconds_per_step": per_step, "estimated_seconds": per_step * steps}


def condense_file(teacher: str | os.PathLike, output: str | os.PathLike, *, force: bool = False,
                  stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
                  data: str | ImageData | TextData = "", **kwargs: Any) -> dict[str, Any]:
    """`condense`, then write the learngene to `output` ('-' for stdout) with
    provenance chained to the teacher (and the teacher's tokenizer files, for
    a language model). The output is checked before any work."""
    target = checked_output(output, force=force, inputs=(teacher.source if isinstance(teacher, Checkpoint)
                                                           else str(teacher),), folder=False)  # one file
    settings: CondenseSettings = kwargs.get("settings") or CondenseSettings()
    learngene, checkpoint, report = condense(teacher, data or None, stdin=stdin, **kwargs)
    if kwargs.get("dry_run"):
        if learngene is not None:  # sampled (PEG): no training steps to time
            report = _plan(learngene.kind, report["teacher"], report["auxiliary"], 0, settings,
                           report["parameters"]["learngene"], report["parameters"]["teacher"], 0.0, 0)
        report["output"] = "<stdout>" if str(output) == STDIO else str(output)
        return report
    if distributed_setup(settings.device).rank == 0:
        report["sha256"] = save_learngene(target, learngene, options=report["options"], source=checkpoint,
                                          force=force, stdout=stdout)
    report["output"] = "<stdout>" if str(output) == STDIO else str(output)
    if str(output) != STDIO and distributed_setup(settings.device).rank == 0:
        # The line lg inspect prints for it, from the file as written: its descendants' form is the file's (a
        # learngene of a timm hub folder's model keeps no hub config, so they are single files).
        report["expand_call"] = grow_hint(str(output), load_learngene(read_checkpoint(str(output))))
    return report


def _read_data(model: GeneratedModel, data, checkpoint: Checkpoint, name: str, settings: CondenseSettings,
               reading: Mapping[str, Any], notify: Notify):
    """The data `model` (a generated model of the teacher's family) trains
    or is scored on, read as `reading` says; text with the tokenizer beside
    the teacher's weights. Images hold out 20 % by default."""
    test_fraction = reading["test_fraction"]
    if test_fraction is None and model.task == IMAGE_CLASSIFICATION:
        test_fraction = DEFAULT_CONDENSE_IMAGE_TEST_FRACTION
    if reading["seq_len"] is not None and model.task == IMAGE_CLASSIFICATION:
        raise UsageError("--seq-len is for language models; the teacher is an image classifier")
    return data_for(model, data, name, companions=checkpoint.companions,
                    where=checkpoint.label,
                    subset=reading["subset"], test_subset=reading["test_subset"], test_fraction=test_fraction,
                    seed=settings.seed, fitting="a learngene", notify=notify, seq_len=reading["seq_len"])


def _scores(model: torch.nn.Module, teacher: torch.nn.Module, data: ImageData | TextData,
            device: str) -> dict[str, Any]:
    """What condensing records of the test split: the auxiliary model's and
    the teacher's top-1 and top-5 on images, loss and perplexity on text."""
    if isinstance(data, ImageData):
        scores = evaluate_accuracy(model, data.test, device=device)
        teacher_scores = evaluate_accuracy(teacher, data.test, device=device)
        return {"accuracy": {k: round(v, 4) for k, v in scores.items() if k != "images"},
                "teacher_accuracy": {k: round(v, 4) for k, v in teacher_scores.items() if k != "images"},
                "test_images": scores["images"]}
    scores = evaluate_text(model, data.test, device=device)
    teacher_scores = evaluate_text(teacher, data.test, device=device)
    return {"loss": {k: round(v, 4) for k, v in scores.items() if k != "tokens"},
            "teacher_loss": {k: round(v, 4) for k, v in teacher_scores.items() if k != "tokens"},
            "test_tokens": scores["tokens"]}


def _load_teacher(checkpoint: Checkpoint, heads: int | None, role: str, overrides: Overrides | None = None):
    """The model a learngene is condensed from (a model of stages, Swin,
    gives a learngene per stage: `learngenes.stages`), its preprocessing
    with `overrides` applied."""
    if is_learngene(checkpoint):
        raise LgError(f"the {role} must be a model checkpoint; this file is a learngene")
    loaded = overridden(load(checkpoint, heads=heads), overrides)
    check_heads_known(loaded.spec, because="the learngene would record them", flag="--teacher-heads",
                      where=checkpoint.label)
    return loaded


def _sizes(spec: ArchSpec) -> str:
    """A model's sizes in a message: depth x width, or per stage for a model of stages."""
    if spec.stages:
        return (f"depths {','.join(str(s.depth) for s in spec.stages)} x widths "
                f"{','.join(str(s.width) for s in spec.stages)}")
    return f"{spec.depth} x {spec.width}"


def _own_shape(ancestry: ArchSpec, sizes: Mapping[str, Any]) -> ArchSpec:
    """A PEG learngene as a model of its own shape: its FFN layers deep, its
    heads wide (at the ancestry's head dim); stage by stage for a model of stages."""
    if not ancestry.stages:
        return target_spec(ancestry, depth=sizes["learngene_layers"],
                           width=sizes["learngene_heads"] * ancestry.head_dim, heads=sizes["learngene_heads"])
    stages: list[ArchSpec] = []
    for stage, own in zip(ancestry.stages, sizes["stages"]):
        width = own["learngene_heads"] * stage.head_dim
        shaped = stage.with_sizes(depth=own["learngene_layers"], width=width, heads=own["learngene_heads"],
                                  mlp_dim=round(stage.mlp_dim * width / stage.width))
        stages.append(shaped.with_sizes(stage_input=stages[-1].width) if stages else shaped)
    return ancestry.with_stages(tuple(stages))


def _sample(kind, options: Mapping[str, Any], teacher, data, settings: CondenseSettings, *,
            teacher_heads: int | None, notify: Notify, stdin: BinaryIO | None,
            started: float, reading: Mapping[str, Any],
            overrides: Overrides | None = None) -> tuple[Learngene, Checkpoint, dict[str, Any]]:
    """Condense a training-free kind (PEG): sample its tensors from the
    ancestry, seeded. With `data`, score the learngene as a model of its own
    shape (its FFN layers deep, its heads wide, built by a fresh map φ) and
    the ancestry beside it."""
    checkpoint = teacher if isinstance(teacher, Checkpoint) else read_checkpoint(teacher, stdin=stdin)
    loaded = _load_teacher(checkpoint, teacher_heads, "ancestry", overrides)
    preprocessing_of(loaded)  # says when it is assumed
    kind = get_kind(kind.name, loaded.spec)  # per stage for a model of stages
    generator = torch.Generator().manual_seed(settings.seed)
    tensors, sizes = kind.sample(loaded.spec, loaded.stack, options, generator)
    learngene = Learngene(kind=kind.name, spec=loaded.spec, tensors=tensors, sizes=sizes)
    own_shape = _own_shape(loaded.spec, sizes)
    condensed: dict[str, Any] = {"sampled": True}
    report: dict[str, Any] = {"command": "condense", "method": kind.name,
                              "options": {**options, "seed": settings.seed}, "teacher": spec_sizes(loaded.spec),
                              "auxiliary": spec_sizes(own_shape), "sizes": sizes,
                              "parameters": {"teacher": loaded.stack.num_parameters(),
                                             "learngene": sum(t.numel() for n, t in tensors.items()
                                                              if not n.startswith("mix."))}}
    stages = sizes.get("stages", [sizes])
    heads = [s["learngene_heads"] for s in stages]
    notify(f"condense {kind.name}: sampled {','.join(map(str, heads))} head{'s' * (heads != [1])} per layer "
           f"and {','.join(str(s['learngene_layers']) for s in stages)} FFNs from the {_sizes(loaded.spec)} "
           f"ancestry{' (per stage)' if loaded.spec.stages else ''} "
           f"({stages[0]['mixture']} mixtures, seed {settings.seed}); no training")
    if data is not None:
        model = attach(kind.prepare(learngene, own_shape, {}, settings.seed).eval(),
                       loaded.spec.extras.get(PREPROCESSING))
        dataset = _read_data(model, data, checkpoint, "the ancestry", settings, reading, notify)
        ancestry = build_model(loaded.spec, loaded.stack)
        condensed.update({"data": dataset.describe(), **_scores(model, ancestry, dataset, settings.device)})
    learngene.condensed = condensed
    report.update({"steps": 0, "seconds": round(time.perf_counter() - started, 1), **condensed})
    return learngene, checkpoint, report


def teacher_statistics(loaded, stack: Stack, data: Any, *, seed: int, device: str, seq_len: int | None,
                       notify: Callable[[str], None]):
    """The teacher's statistics (`lgcli.calibration.Calibration`) on `data`,
    by the calibration pass: its default number of examples, or the whole
    train split when it is smaller, drawn by `seed`."""
    from .calibration import DEFAULT_CALIBRATION_SAMPLES, calibrate, calibration_device, calibration_examples

    spec = loaded.spec
    model = build_model(spec, stack)
    examples, name = calibration_examples(model, spec, data, samples=DEFAULT_CALIBRATION_SAMPLES, seed=seed,
                                          seq_len=seq_len, companions=loaded.checkpoint.companions,
                                          where=loaded.checkpoint.label, notify=notify, at_most=True, flag="--data",
                                          seq_len_flag="--seq-len")
    return calibrate(model, spec, examples, name=name, seed=seed, device=calibration_device(device))


def importance_ordered(loaded, stack: Stack, data: Any, *, seed: int, device: str, seq_len: int | None,
                       notify: Callable[[str], None], statistics=None) -> tuple[Stack, dict[str, Any]]:
    """The teacher's `stack` with its channels in order of importance
    (`learngenes.widths.importance_orders`, a permutation that keeps the
    function), measured on `data` (`teacher_statistics`, unless given its
    `statistics`), and what was measured (for the record)."""
    if statistics is None:
        statistics = teacher_statistics(loaded, stack, data, seed=seed, device=device, seq_len=seq_len,
                                        notify=notify)
    notify(f"condense: channels ordered by importance on {statistics.samples} examples of {statistics.data} "
           f"({statistics.seconds:.1f} s), so that each width keeps the teacher's most important")
    from .learngenes.widths import importance_orders, permuted_stack

    return permuted_stack(stack, importance_orders(statistics, loaded.spec)), statistics.describe()

