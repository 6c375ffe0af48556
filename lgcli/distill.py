"""Heal a model by distillation from a teacher of its family: what `lg distill` does, as functions.

    >>> from lgcli.distill import DistillSettings, distill_file
    >>> report = distill_file("small.safetensors", "healed.safetensors", teacher="big.safetensors",
    ...                       data="fashion-mnist-mini", settings=DistillSettings(steps=300))

The student (any model lg reads or wrote: a resized model, typically) trains
through the one loop, `lgcli.train.train`, on the loss of SPEC.md
"Distillation (`lg distill`)":

    L = alpha tau^2 KL(softmax(z_t / tau) || softmax(z_s / tau)) + (1 - alpha) CE(z_s, y)

over the classes of an image, or over the vocabulary at every scored
position of a token window (a causal LM's next tokens: the targets are
shifted as the model's own loss shifts them, `lgcli.text.causal_targets`;
a masked LM's masked tokens). The teacher is frozen, in eval mode; its
logits are kept per image where the images are not augmented
(`train.TeacherLogits`). The written model takes the student's own form (a
timm file or hub folder, a Hugging Face folder with its tokenizer), the
student's dtypes, and provenance chained to the student with the teacher's
sha256 in the options.

The default alpha depends on the data (`default_alpha`). On images it is
1 (pure distillation): healing a resized model is recovering its source's
function, and the teacher's soft targets carry what the labels do and more;
Minitron (Muralidharan et al. 2024, the pruning-then-distillation recipe the
issue follows) found logit-only KD better than mixing in the labels' loss
when retraining pruned models, and TLEG's reference condense uses alpha = 1
too. It also needs no labels of the models' classes, so an image classifier
of other classes than the data can still be distilled on them. On the
example ViT alphas 1, 0.5 and 0 tie on top-1 and alpha 1 ends closest to
the teacher (docs/cli.md).

On text it is 0.5: half the next-token loss, half the teacher's, the mix
WAVE condenses with. Text always has its labels (the next tokens), and at
the step counts lg runs on them the mix heals to a lower held-out
perplexity than either alone: the example Llama shrunk to 2 layers, three
seeds, 22.8 against alpha 1's 25.2 and alpha 0's 23.4 after 600 steps
(benchmarks/distill_alpha.py); SmolLM2-135M shrunk to 20 layers, 21.0 and
20.8 (two seeds) against 25.9 and 25.9 after 300 steps
(benchmarks/real/smollm2_learngene.jsonl).
Minitron's finding is for runs of billions of tokens; the hundreds of
steps of a CPU run are not that regime.

`hidden_weight` W > 0 adds W times the mean squared error between the
student's hidden states and the teacher's at matched blocks (TinyBERT's
hidden-state loss, as Minitron heals depth-pruned models), where their widths
are equal; the blocks are matched by the student's provenance where it says
which teacher block each came from, else uniformly (`lgcli.hidden_states`).
The teacher then runs on every step: its hidden states are not cached (per
image they would be L x tokens x D numbers, where its logits are one row).

A training checkpoint records what the run is made from (the student, the
teacher, the data, alpha, tau, W, the stopping rule): `--resume` of one made
from anything else is refused, naming each difference.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Mapping

from .inspection import grow_hint, load_line
from .learngene_files import is_learngene, load_learngene
from .loading import Loaded, build_model, load, spec_of_model
from .outputs import checked_output, plan_output
from .saving import save
from .arch import adapter_of_model, get_adapter
from .arch.base import IMAGE_CLASSIFICATION, TEXT_ENCODER
from .card import CardFacts
from .checkpoint import STDIO, Checkpoint, check_source, read_checkpoint
from .checks import check_real, check_whole
from .data import builtin_names, load_data
from .images import ImageData, check_channels, in_models_label_order
from .errors import LgError, UsageError, counted, notify_stderr
from .hidden_states import FROM_PROVENANCE, HiddenStateTerm, check_shapes, layer_map
from .held_out import HeldOutScores, vocabulary, worsened
from .lazy import nn, torch
from .options import (DEFAULT_DISTILL_ALPHA_IMAGES, DEFAULT_DISTILL_ALPHA_TEXT, DEFAULT_DISTILL_BATCH_SIZE,
                      DEFAULT_DISTILL_LR, DEFAULT_DISTILL_STEPS, DEFAULT_DISTILL_TAU)
from .sizing import check_heads_known, spec_sizes
from .stack import ArchSpec, Stack
from .text import TextData, builtin_texts, check_data_source, text_data_for
from .tokenizing import ANOTHER_TEACHER
from .devices import auto_device_note, concrete_device
from .heads import class_names, classes_of, model_input, model_preprocessing
from .preprocessing import Overrides, Preprocessing, attach, preprocessing_of_spec, with_preprocessing
from .losses import distillation_loss
from .run_settings import RunSettings
from .train import (StepCallback, TrainConfig, check_checkpoint_path, check_resume,
                    seconds_per_step, train)

Notify = Callable[[str], None]
# The warm-up of an already-initialised model's fine-tuning (as lg eval's probe).
DEFAULT_WARMUP_FRACTION = 0.1
# Images held out to score the models before and after, when --test-fraction is not given.
DEFAULT_IMAGE_TEST_FRACTION = 0.2


@dataclass
class DistillSettings(RunSettings):
    """A distillation run's settings (the training run's shared ones,
    `run_settings.RunSettings`: warm-up, by default 10 % of the steps, weight
    decay, seed, device, checkpoint, --until), checked when constructed (and
    again by `distill`) with the messages the CLI's flags would get."""

    steps: int = DEFAULT_DISTILL_STEPS
    batch_size: int = DEFAULT_DISTILL_BATCH_SIZE
    lr: float = DEFAULT_DISTILL_LR
    alpha: float | None = None  # None: by the data (`default_alpha`; the module's docstring says why)
    tau: float = DEFAULT_DISTILL_TAU
    # W of the hidden-state term (0: logits only; `lgcli.hidden_states`).
    hidden_weight: float = 0.0

    def check(self) -> None:
        check_whole(self.steps, "--steps", 1)
        check_whole(self.batch_size, "--batch-size", 1)
        check_real(self.lr, "--lr", "a positive finite number", lambda v: v > 0)
        if self.alpha is not None:
            check_real(self.alpha, "--alpha", "a number in [0, 1]", lambda v: 0 <= v <= 1)
        check_real(self.tau, "--tau", "a positive finite number", lambda v: v > 0)
        check_real(self.hidden_weight, "--hidden-weight", "a finite number >= 0", lambda v: v >= 0)
        super().check()

    def warmup_steps(self) -> int:
        return int(self.steps * DEFAULT_WARMUP_FRACTION) if self.warmup is None else self.warmup


@dataclass
class Party:
    """The student or the teacher, read: a float32 model lg may train or run
    (its own copy), and what it was read from."""

    role: str  # "student" or "teacher"
    model: nn.Module
    spec: ArchSpec
    stack: Stack  # as read (lazy for a file): what the output is planned from before any training
    task: str
    where: str  # the file or folder, as messages show it
    loaded: Loaded | None  # None for a live model handed in
    dtype: torch.dtype  # the dominant dtype of its weights, as read
    # Whose tokenizer files the written model holds when not its own: the
    # teacher's, for a live language model tokenized as its teacher is.
    tokenizer_from: Checkpoint | None = None

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self.loaded.checkpoint if self.loaded is not None else None

    @property
    def companions(self) -> Mapping[str, Any] | None:
        """The files beside its weights; None for a live model, which states
        no tokenizer (text takes the other party's: `text_data_for`)."""
        return self.checkpoint.companions if self.checkpoint is not None else None

    def sizes(self) -> dict[str, Any]:
        return spec_sizes(self.spec)


def read_party(source: Any, role: str, heads: int | None = None, stdin: BinaryIO | None = None) -> Party:
    """The student or teacher from a path ('-': stdin), a read `Checkpoint`,
    a `Loaded`, or a live model of a family lg knows (copied, never changed)."""
    if isinstance(source, torch.nn.Module):
        adapter = adapter_of_model(source)
        dtype = next(source.parameters()).dtype
        spec, stack = spec_of_model(source)
        model = copy.deepcopy(source).float()
        return Party(role, model, spec, stack, adapter.model_task(model), f"the {role} model", None, dtype)
    if isinstance(source, Loaded):
        loaded = source
    else:
        checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
        if is_learngene(checkpoint):
            learngene = load_learngene(checkpoint)  # the line that builds one, as lg inspect prints it
            raise LgError(f"the {role} must be a model; {checkpoint.label} is a learngene: build a model from it "
                          f"with {grow_hint(checkpoint.label, learngene)}")
        loaded = load(checkpoint, heads=heads)
    check_heads_known(loaded.spec, because="the model's outputs depend on them",
                      flag="--student-heads" if role == "student" else "--teacher-heads",
                      where=loaded.checkpoint.label)
    # Told how its images are prepared (a real DINOv2: ImageNet's mean and std), as
    # training and scoring feed it: without, both fed it lg's default (0.5, 0.5).
    model = build_model(loaded.spec, loaded.stack)
    return Party(role, model, loaded.spec, loaded.stack, get_adapter(loaded.spec.family).model_task(model),
                 loaded.checkpoint.label, loaded, loaded.dtype or torch.float32)


def prepared_as_teacher(student: Party, teacher: Party, notify: Notify) -> Party:
    """The student, its images prepared as the teacher's are when it states
    no way of its own and the teacher does (a live model lg did not load, a
    file that records none): the teacher's outputs are the targets, so it
    must see inputs prepared its way. The written student records it."""
    own, theirs = model_preprocessing(student.model), model_preprocessing(teacher.model)
    if theirs is None or theirs.assumed or (own is not None and not own.assumed) or own == theirs:
        return student
    notify(f"distill: {student.where} states no preprocessing; its images are prepared as the teacher's "
           f"({theirs.source}), and the output records it")
    return _with_recipe(student, theirs)


def with_overrides(party: Party, overrides: Overrides) -> Party:
    """The party, its images prepared with --mean, --std or --interpolation
    over its own recipe (both models see the same images); the written
    student records it."""
    own = model_preprocessing(party.model) or preprocessing_of_spec(party.spec, get_adapter(party.spec.family))
    if own is None:
        raise UsageError("--mean, --std and --interpolation prepare images; these models take tokens")
    return _with_recipe(party, overrides.apply(own))


def _with_recipe(party: Party, recipe: Preprocessing) -> Party:
    """The party fed images prepared by `recipe`, its spec (what is written) saying so."""
    attach(party.model, recipe)
    return dataclasses.replace(party, spec=with_preprocessing(party.spec, recipe))


def check_pair(student: Party, teacher: Party) -> None:
    """The teacher must do what the student does over the same outputs: the
    same family and task, the same classes and input (images) or vocabulary
    (text). Refused in one line naming what differs."""
    if teacher.spec.family != student.spec.family:
        raise LgError(f"the teacher ({teacher.where}) is a {teacher.spec.family} model and the student "
                      f"({student.where}) a {student.spec.family} model: distil from a teacher of the student's "
                      f"family")
    if teacher.task != student.task:
        raise LgError(f"the teacher ({teacher.where}) is a {teacher.task} model and the student ({student.where}) a "
                      f"{student.task} model: their logits do not compare")
    if student.task == TEXT_ENCODER:
        raise LgError(f"{student.where} is a text encoder without a language-model head: it has no logits to "
                      f"distil (give its masked-LM checkpoint, e.g. BertForMaskedLM)")
    if student.task == IMAGE_CLASSIFICATION:
        # The inputs first: a model of features (no head) is refused as one, not for its config's default labels.
        inputs = model_input(student.model), model_input(teacher.model)
        ours, theirs = classes_of(student.model), classes_of(teacher.model)
        if ours != theirs:
            raise LgError(f"the teacher has {theirs} classes and the student {ours}: distil from a teacher of the "
                          f"student's classes")
        ours, theirs = inputs
        if ours != theirs:
            raise LgError(f"the teacher takes {theirs[0]}-channel {theirs[1]}-pixel images and the student "
                          f"{ours[0]}-channel {ours[1]}-pixel ones: distil from a teacher of the student's input")
        return
    ours, theirs = vocabulary(student.model), vocabulary(teacher.model)
    if ours != theirs:
        raise LgError(f"the teacher's vocabulary has {theirs} tokens and the student's {ours}: distil from a "
                      f"teacher of the student's vocabulary")


def read_data(student: Party, teacher: Party, data: Any, *, subset: Any = None, test_subset: Any = None,
              test_fraction: float | None = None, seq_len: int | None = None, seed: int = 0,
              notify: Notify = notify_stderr) -> ImageData | TextData:
    """The data the student takes: images of its input (an `ImageData`, an
    image folder or built-in name; 20 % held out by default), or text windows
    for a language model, tokenized with the tokenizer the student and the
    teacher share (refused when they do not)."""
    name = getattr(data, "name", data)
    if student.task == IMAGE_CLASSIFICATION:
        if seq_len is not None:
            raise UsageError("--seq-len is for language models; the student is an image classifier")
        if isinstance(data, TextData) or (isinstance(data, (str, os.PathLike)) and os.fspath(data) in builtin_texts()):
            raise LgError(f"--data {name} is a text; the student is an image classifier (give an image folder or "
                          f"{', '.join(builtin_names())})")
        if not isinstance(data, ImageData):
            data = load_data(data, subset=subset, test_subset=test_subset, seed=seed,
                             test_fraction=DEFAULT_IMAGE_TEST_FRACTION if test_fraction is None else test_fraction)
        check_channels(data, model_input(student.model)[0])
        # Labels (--alpha below 1) numbered as the two heads number them.
        return in_models_label_order(data, [class_names(student.model), class_names(teacher.model)], notify)
    if isinstance(data, ImageData) or (isinstance(data, (str, os.PathLike)) and os.fspath(data) in builtin_names()):
        raise LgError(f"--data {name} is an image dataset; the student is a language model (give a text file, a "
                      f"folder of .txt files or {', '.join(builtin_texts())})")
    if seq_len is not None:
        check_whole(seq_len, "--seq-len", 1)
    return text_data_for([("the student", student.model, student.companions, student.where),
                          ("the teacher", teacher.model, teacher.companions, teacher.where)], student.task, data,
                         seq_len=seq_len, subset=subset, test_subset=test_subset, test_fraction=test_fraction,
                         seed=seed, notify=notify, tokenizer_advice=ANOTHER_TEACHER)


def default_alpha(data: ImageData | TextData) -> float:
    """The alpha a run not given one distils with: 0.5 on text, 1 on images (the module's docstring says why)."""
    return DEFAULT_DISTILL_ALPHA_TEXT if isinstance(data, TextData) else DEFAULT_DISTILL_ALPHA_IMAGES


def labels_fit(student: Party, data: ImageData | TextData) -> bool:
    """Whether the data's labels are the model's outputs: text's next (or
    masked) tokens always are; images' when their classes are the model's."""
    return not isinstance(data, ImageData) or data.num_classes == classes_of(student.model)


def distill(student: Any, teacher: Any, data: ImageData | TextData | str | os.PathLike | None,
            **kwargs: Any) -> tuple[nn.Module | None, dict[str, Any]]:
    """Distil `teacher` into `student` on `data`. Returns the trained student
    (a float32 model on the CPU, in eval mode; the student given is never
    changed) and a JSON-ready report: the held-out figures of the teacher and
    of the student before and after, the steps, the losses and the time.

    `student` and `teacher` are paths ('-': stdin, for one of them), read
    `Checkpoint`s, `Loaded`s, or live models of a family lg knows. `data`
    is what the student takes (`read_data`). `dry_run`: everything is read
    and checked, a few steps are timed on a copy, and the plan comes back
    in place of the model, which is None. The keywords are `run`'s."""
    _, model, report = run(student, teacher, data, **kwargs)
    return model, report


def run(student: Any, teacher: Any, data: ImageData | TextData | str | os.PathLike | None, *,
        settings: DistillSettings | None = None, student_heads: int | None = None,
        teacher_heads: int | None = None, subset: Any = None, test_subset: Any = None,
        test_fraction: float | None = None, seq_len: int | None = None, notify: Notify = notify_stderr,
        on_step: StepCallback | None = None, stdin: BinaryIO | None = None, dry_run: bool = False,
        check_student: Callable[[Party], None] | None = None,
        preprocessing: Overrides | None = None, score: bool = True) -> tuple[Party, nn.Module | None, dict[str, Any]]:
    """`distill`, returning the student as read (`Party`: what `save` chains
    the output to) before the trained model and the report. `check_student`
    is called on the student once it is read, before any data or training
    (`distill_file` plans its output there). `preprocessing`: --mean, --std
    and --interpolation over both models' own recipes. `score`: False
    leaves the held-out figures out (the report's "held_out" is empty), for
    a caller that measures the student its own way (lg bench's probe)."""
    started = time.perf_counter()
    if not is_main_process():  # under torchrun, one process speaks for all
        notify = _silent
    settings = settings or DistillSettings()
    settings.check()  # again: a settings object's fields can be changed after it was made
    paths = [s for s in (student, teacher) if isinstance(s, (str, os.PathLike))]
    if sum(os.fspath(p) == STDIO for p in paths) > 1:
        raise UsageError("stdin ('-') can be read only once: give the teacher as a file or folder")
    for path in paths:  # a mistyped path is said before torch or a model is paid for
        check_source(path)
    if data is None:
        raise UsageError("give the data to distil on: --data D")
    check_data_source(data)
    device_note = auto_device_note(settings.device)
    settings = dataclasses.replace(settings, device=concrete_device(settings.device))
    pupil = read_party(student, "student", student_heads, stdin)
    if check_student is not None:
        check_student(pupil)
    master = read_party(teacher, "teacher", teacher_heads, stdin)
    check_pair(pupil, master)
    pupil = prepared_as_teacher(pupil, master, notify)
    if preprocessing:
        pupil, master = with_overrides(pupil, preprocessing), with_overrides(master, preprocessing)
    mapping = None
    if settings.hidden_weight > 0:
        check_shapes(pupil.spec, master.spec, pupil.where, master.where)
        mapping = layer_map(pupil.spec.depth, master.spec.depth, pupil.checkpoint.lg if pupil.checkpoint else None,
                            master.checkpoint.sha256 if master.checkpoint else None)

    def hidden_term(model: nn.Module) -> HiddenStateTerm | None:
        """The hidden-state term on `model` (the student, or a copy) and the teacher; None when W is 0."""
        if mapping is None:
            return None
        return HiddenStateTerm(settings.hidden_weight, model, pupil.spec, master.model, master.spec, mapping[0])

    dataset = read_data(pupil, master, data, subset=subset, test_subset=test_subset, test_fraction=test_fraction,
                        seq_len=seq_len, seed=settings.seed, notify=notify)
    if settings.alpha is None:
        settings = dataclasses.replace(settings, alpha=default_alpha(dataset))
    if pupil.companions is None and isinstance(dataset, TextData):
        pupil = dataclasses.replace(pupil, tokenizer_from=master.checkpoint)
    loss_fn = distillation_loss(settings.alpha, settings.tau)
    with_labels = labels_fit(pupil, dataset)
    if not with_labels:
        for flag, given in (("--alpha below 1", settings.alpha < 1), ("--until", settings.until is not None)):
            if given:
                raise LgError(f"{flag} needs labels of the models' classes: they have {classes_of(pupil.model)} and "
                              f"{dataset.name} has {dataset.num_classes} (distil with --alpha 1 alone, or give "
                              f"data of their classes)")
    held_out = None
    if settings.until is not None:
        from .stopping import hold_out

        dataset, held_out = hold_out(dataset, settings.seed)
    unit = "images" if isinstance(dataset, ImageData) else "windows"
    if len(dataset.train) < settings.batch_size:
        raise LgError(f"the train split has {len(dataset.train)} {unit}, fewer than one batch of "
                      f"{settings.batch_size} (lower --batch-size)")
    config = TrainConfig(steps=settings.steps, batch_size=settings.batch_size, lr=settings.lr,
                         weight_decay=settings.weight_decay, warmup_steps=settings.warmup_steps(), seed=settings.seed,
                         device=settings.device, checkpoint_path=settings.checkpoint,
                         checkpoint_every=settings.checkpoint_every, resume=settings.resume, force=settings.force,
                         progress=settings.progress, description="distilling",
                         callback_every=1 if on_step is not None else settings.until_every,
                         origin=_run_origin(pupil, master, dataset, settings, mapping,
                                            {"subset": subset, "test_subset": test_subset,
                                             "test_fraction": test_fraction, "seq_len": seq_len})
                         if settings.checkpoint else {})
    check_checkpoint_path(config)  # a training checkpoint in the way is said before any work
    check_resume(config, stateful=held_out is not None)  # a --resume of another run refused in one line, first
    if dry_run:
        trial = copy.deepcopy(pupil.model)
        timing: dict[str, Any] = {}  # the batch timed: a small one, scaled to the batch asked when slow
        with contextlib.ExitStack() as hooks:
            term = hidden_term(trial)
            per_step, timed = seconds_per_step(
                trial, dataset.train, config, timing=timing, teacher=master.model, cache_teacher=term is None,
                loss_fn=loss_fn if term is None else hooks.enter_context(term).loss(loss_fn))
        plan = {"dry_run": True, "command": "distill", "student": pupil.sizes(), "teacher": master.sizes(),
                "parameters": {"student": _parameters(pupil.model), "teacher": _parameters(master.model)},
                "data": dataset.describe(), "steps": settings.steps, "batch_size": settings.batch_size,
                "until": settings.until, "device": settings.device, "timed_steps": timed,
                "timed_batch_size": timing["batch_size"], "seconds_per_step": per_step,
                "estimated_seconds": per_step * settings.steps}
        if score:  # the held-out figures before and after, beside the teacher's: on a CPU, often the longer part
            plan["scoring"] = HeldOutScores(master.model, dataset, with_labels=with_labels, tau=settings.tau,
                                            device=settings.device).planned(trial)
            plan["estimated_seconds"] += plan["scoring"]["estimated_seconds"]
        if mapping is not None:
            plan["hidden_weight"] = settings.hidden_weight
            plan["hidden_layers"] = _hidden_record(mapping)
        return pupil, None, plan
    # Scoring runs the teacher once and the student before and after on images,
    # each beside the teacher on text (lgcli.held_out): on a CPU and a real
    # model's held-out split, longer than a short run, so a long pass says so.
    notify(f"distill: student {_shape(pupil.spec)} from teacher {_shape(master.spec)} on {dataset.name}, "
           f"{counted(settings.steps, 'step')} of {settings.batch_size}, alpha {settings.alpha:g}, tau {settings.tau:g}"
           f"{f', hidden-state weight {settings.hidden_weight:g}' if mapping is not None else ''}"
           f"{f'; scored before and after on {len(dataset.test):,} held-out {unit}' if score else ''}")
    if mapping is not None:
        how = "the blocks they came from, by the student's provenance" if mapping[1] == FROM_PROVENANCE \
            else "uniformly spaced"
        notify(f"distill: the student's {pupil.spec.depth} blocks' hidden states match the teacher's blocks "
               f"{','.join(map(str, mapping[0]))} ({how}); the teacher runs every step (its hidden states are "
               f"not cached)")
    if device_note:
        notify(device_note)
    term = hidden_term(pupil.model)
    figures: dict[str, Any] = {}
    if score:  # a pass its first batch says is long is announced, with how to score fewer
        scores = HeldOutScores(master.model, dataset, with_labels=with_labels, tau=settings.tau,
                               device=settings.device, notify=lambda message: notify(f"distill: {message}"),
                               fewer_flag="--test-subset")
        before = scores.student(pupil.model, hidden=term)  # on text its pass gives the teacher's figures too
        figures.update(teacher=scores.teacher(), before=before)
    rule = None
    if held_out is not None:
        from .stopping import StoppingRule

        rule = StoppingRule(settings.until, settings.until_every, held_out, master.model, settings.device, notify,
                            command="distill")
    callback = on_step if rule is None else rule.wrap(on_step)
    if term is None:  # the rule's state goes into each training checkpoint
        result = train(pupil.model, dataset.train, config, loss_fn=loss_fn, teacher=master.model, on_step=callback,
                       on_step_state=rule)
    else:
        with term:
            result = train(pupil.model, dataset.train, config, loss_fn=term.loss(loss_fn), teacher=master.model,
                           on_step=callback, cache_teacher=False, on_step_state=rule)
    if score:
        figures["after"] = scores.student(pupil.model, hidden=term)
        if term is not None:
            notify(f"distill: held-out hidden-state MSE {figures['before']['hidden_mse']:.4g} -> "
                   f"{figures['after']['hidden_mse']:.4g}")
        if worse := worsened(figures["before"], figures["after"]):
            warmup = f"{counted(config.warmup_steps, 'step')} of" if config.warmup_steps else "no"
            notify(f"distill: the student ended further from its teacher than it started (held-out {worse}): "
                   f"{counted(result.steps, 'step')} at rate {settings.lr:g} with {warmup} warm-up were too few "
                   f"for that rate; give more --steps (the first {DEFAULT_WARMUP_FRACTION * 100:g} % warm up unless "
                   f"--warmup is given) or a lower --lr")
    pupil.model.cpu().eval()
    master.model.cpu()
    window = max(1, min(20, len(result.losses) // 5))
    teacher_record = {"file": master.where, "sha256": master.checkpoint.sha256 if master.checkpoint else None}
    # What the written file records is what the run computed: no wall time
    # nor resume point, so the same command and seed write the same bytes.
    recorded = {"teacher": teacher_record["file"], "teacher_sha256": teacher_record["sha256"],
                "data": dataset.name, "alpha": settings.alpha, "tau": settings.tau, "steps": settings.steps,
                "batch_size": settings.batch_size, "lr": settings.lr, "warmup": config.warmup_steps,
                "weight_decay": settings.weight_decay, "seed": settings.seed,
                **({"until": settings.until, "until_every": settings.until_every} if rule is not None else {}),
                # Only where the term was used: a run without it writes what it always wrote.
                **({"hidden_weight": settings.hidden_weight, "hidden_layers": _hidden_record(mapping)}
                   if mapping is not None else {})}
    report = {"command": "distill", "student": pupil.sizes(), "teacher": master.sizes(),
              "teacher_file": teacher_record, "data": dataset.describe(), "options": recorded,
              "steps": result.steps, "resumed_from": result.resumed_from,
              "loss_first": sum(result.losses[:window]) / window if result.losses else None,
              "loss_last": sum(result.losses[-window:]) / window if result.losses else None,
              "held_out": figures, "seconds": round(time.perf_counter() - started, 1)}
    if rule is not None:
        report["until"] = rule.report(result.steps, settings.steps)
    return pupil, pupil.model, report


def _hidden_record(mapping: tuple[list[int], str]) -> dict[str, Any]:
    """The layer map as the report and the file record it."""
    return {"teacher_blocks": mapping[0], "from": mapping[1]}


def _run_origin(student: Party, teacher: Party, dataset: ImageData | TextData, settings: DistillSettings,
                mapping: tuple[list[int], str] | None, reading: Mapping[str, Any]) -> dict[str, Any]:
    """What a distillation run is made from, as its training checkpoint
    records it: a --resume of a checkpoint made from another student,
    teacher, data, loss (alpha, tau, hidden weight and layer map) or stopping
    rule is refused, naming each difference (`lgcli.train`). The step
    settings (steps, batch, rate, seed) are the training run's own, compared there."""
    origin = {"student_sha256": student.checkpoint.sha256 if student.checkpoint else None,
              "teacher_sha256": teacher.checkpoint.sha256 if teacher.checkpoint else None,
              "student": student.sizes(), "teacher": teacher.sizes(), "data": dataset.describe(),
              "reading": dict(reading), "alpha": settings.alpha, "tau": settings.tau,
              "hidden_weight": settings.hidden_weight,
              "hidden_layers": _hidden_record(mapping) if mapping is not None else None,
              "until": settings.until, "until_every": settings.until_every}
    return json.loads(json.dumps(origin, default=str))  # plain values: a weights_only load reads them


def distill_file(student: Any, output: str | os.PathLike, *, teacher: Any,
                 data: ImageData | TextData | str | os.PathLike | None, force: bool = False,
                 stdout: BinaryIO | None = None, card: CardFacts | None = None, card_file: str | None = None,
                 **kwargs: Any) -> dict[str, Any]:
    """`distill`, then write the student to `output` ('-' for stdout) in its
    own form (a timm file or hub folder, a Hugging Face folder with the
    student's tokenizer files) and dtypes, with provenance chained to the
    student and the teacher's sha256 in its options; `card` and `card_file`
    as `lgcli.saving.save` takes them. The output is checked before any work.
    Returns the report, with the output's name, sha256 and load line."""
    # The files the student and teacher were read from, whatever form they were handed in.
    inputs = tuple(os.fspath(s) if isinstance(s, (str, os.PathLike)) else
                   s.checkpoint.source if isinstance(s, Loaded) else s.source
                   for s in (student, teacher) if isinstance(s, (str, os.PathLike, Loaded, Checkpoint)))
    target = checked_output(output, force=force, inputs=inputs, card_file=card_file)

    def plan(pupil: Party) -> None:  # an output the student's form cannot take is refused before training
        plan_output(target, pupil.spec, pupil.stack, source=pupil.loaded)

    pupil, model, report = run(student, teacher, data, check_student=plan, **kwargs)
    report["output"] = "<stdout>" if str(output) == STDIO else str(output)
    if model is None:  # a dry run
        return report
    spec, stack = materialise(pupil, model)
    if is_main_process():  # under torchrun, one process writes
        facts = CardFacts(command=card.command if card else None,
                          results=(*(card.results if card else ()), *distill_results(report)))
        report["sha256"] = save(target, spec, stack, method="distill", options=report["options"],
                                source=pupil.loaded, companions=pupil.tokenizer_from, force=force, stdout=stdout,
                                card=facts, dtype=None if pupil.loaded is not None else pupil.dtype)
    report["load_line"] = load_line(spec, output)
    return report


def is_main_process() -> bool:
    """Whether this process writes and reports: the only one, or rank 0 of
    the processes torchrun started (the others train their share only)."""
    return int(os.environ.get("RANK", "0")) == 0


def _silent(message: str) -> None:
    """The notify of a process that is not the main one."""


def materialise(party: Party, model: nn.Module) -> tuple[ArchSpec, Stack]:
    """A trained model as (spec, stack) for `save`: the student's own spec
    (its form: a timm hub folder's config, a Hugging Face architecture), and
    the stack its family's adapter reads from the model's state dict."""
    adapter = get_adapter(party.spec.family)
    state = {name: tensor.cpu() for name, tensor in adapter.saved_state(model).items()}
    _, stack = adapter.to_stack(state, config=adapter.config(party.spec))
    return party.spec, stack


def distill_results(report: Mapping[str, Any]) -> list[str]:
    """What a distillation measured, as the model card's lines."""
    figures = report["held_out"]

    def text(scores: Mapping[str, float]) -> str:
        parts = []
        if "top1" in scores:
            parts.append(f"top-1 {scores['top1']:.2f} %")
        if "perplexity" in scores:
            parts.append(f"perplexity {scores['perplexity']:.2f}")
        if "kl" in scores:
            parts.append(f"KL from the teacher {scores['kl']:.4f}, agreement {scores['agreement']:.1f} %")
        if "hidden_mse" in scores:
            parts.append(f"hidden-state MSE {scores['hidden_mse']:.4g}")
        return ", ".join(parts)

    teacher = report["options"]["teacher"]
    line = (f"distilled from `{teacher}` on {report['data']['name']} for {counted(report['steps'], 'step')}: held-out "
            f"{text(figures['before'])} before, {text(figures['after'])} after")
    if figures["teacher"]:
        line += f" (the teacher: {text(figures['teacher'])})"
    return [line]


def _parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _shape(spec: ArchSpec) -> str:
    if spec.stages:
        return (f"depths {','.join(str(s.depth) for s in spec.stages)} x widths "
                f"{','.join(str(s.width) for s in spec.stages)}")
    return f"{spec.depth} x {spec.width}"
