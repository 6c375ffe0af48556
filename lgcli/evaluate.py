"""Accuracy or loss, and the init-quality probe: how fast does an initialised model learn?

`evaluate(...)` scores each checkpoint on the test split: an image
classifier's top-1, top-5 and loss, a language model's loss and perplexity
on held-out text (`lgcli.text`). With ``steps > 0`` it first fine-tunes a
fresh copy of each for that many steps with `lgcli.train` (the same data
order, seed and hyper-parameters for every row, so rows differ only by their
initialisation), scoring the test split at step 0 (the learngene papers'
"instinct") and at intervals. With a learning-rate sweep each row is run at
every rate and reported at its best, so no initialisation wins or loses by
the learning rate alone.

Rows are compared by one figure, their `Measure`: top-1 for images (higher
is better), the loss for text (lower is better).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Callable, Iterator

from lgcli.arch.base import CAUSAL_LM, IMAGE_CLASSIFICATION, MASKED_LM, TEXT_ENCODER
from lgcli.checks import WHOLE_TEST_FRACTION, check_real, check_seed, check_whole
from lgcli.data import DEFAULT_DATA, FASHION_MNIST_CLASSES, load_data
from lgcli.images import ImageData, check_channels, in_models_label_order
from lgcli.checkpoint.reading import check_source, read_checkpoint
from lgcli.errors import LgError, UsageError, counted, notify_stderr, shown
from lgcli.lazy import torch
from lgcli.pace import PassPace
from lgcli.preprocessing import Overrides, attach
from lgcli.recipe import preprocessing_of
from lgcli.sizing import check_heads_known
from lgcli.stack import ArchSpec
from lgcli.text import TextData, builtin_texts, check_data_source, evaluate_text, text_data_for
from lgcli.accuracy import evaluate_accuracy
from lgcli.devices import auto_device_note, concrete_device
from lgcli.heads import class_names, classes_of, model_input, reset_head
from lgcli.train import TrainConfig, train

# Fine-tuning defaults for an already-initialised model, measured by
# benchmarks/probe_lr.py (figures in docs/eval.md): at 1e-3 a well-initialised
# model lost 6.6 points in its first 50 steps and ended below where it began;
# 3e-4 was the best rate for shrunk models and cost the full one < 2 points;
# a warm-up over the first 10 % of the steps halved what remained of the dip.
DEFAULT_LR = 3e-4
DEFAULT_WARMUP_FRACTION = 0.1
DEFAULT_BATCH_SIZE = 64
REPORT_VERSION = 1

Notify = Callable[[str], None]
# An image folder without val/ holds out this share of each class.
DEFAULT_IMAGE_TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Measure:
    """The figure a probe's rows are compared by (`key`, a field of every
    curve point), which way is better, and the figures (`scores`) a row
    keeps as its instinct and final."""

    key: str
    higher_is_better: bool
    scores: tuple[str, ...]

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def shortfall(self, start: float, value: float) -> float:
        """How much worse `value` is than `start` (negative when better)."""
        return start - value if self.higher_is_better else value - start

    def rank(self, final: dict) -> tuple[float, float]:
        """A sweep's order (larger is better): by the figure, then by the loss,
        as a user tuning one learning rate would pick."""
        return (final[self.key] if self.higher_is_better else -final[self.key], -final["loss"])


TOP1 = Measure("top1", True, ("top1", "top5", "loss"))
LOSS = Measure("loss", False, ("loss", "perplexity"))


def measure_of(data: ImageData | TextData) -> Measure:
    return TOP1 if isinstance(data, ImageData) else LOSS


@dataclass
class ProbeSettings:
    """`lg eval`'s settings, checked when constructed (and again by
    `evaluate`) with the messages the CLI's flags would get: learning rates
    finite and > 0, weight decay finite and >= 0, label smoothing in [0, 1),
    batch sizes >= 1, and `seed` a whole number in [0, 2**32 - 1]."""

    steps: int = 0
    lr: float = DEFAULT_LR
    warmup: int | None = None  # None: DEFAULT_WARMUP_FRACTION of the steps
    lr_sweep: list[float] = field(default_factory=list)
    batch_size: int = DEFAULT_BATCH_SIZE
    weight_decay: float = 0.05
    label_smoothing: float = 0.0
    eval_every: int = 0  # 0: steps // 10 (at least 1)
    eval_batch_size: int = 256
    seed: int = 0
    device: str = "auto"  # CUDA when present, else the CPU
    progress: bool = True
    # Keep the final model's figure per test example (a row's
    # `final_examples`): what `lg bench` bootstraps over for one seed.
    keep_examples: bool = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        positive = "a positive finite number"
        check_whole(self.steps, "--steps", 0)
        check_real(self.lr, "--lr", positive, lambda v: v > 0)
        if self.warmup is not None:
            check_whole(self.warmup, "--warmup", 0)
        if isinstance(self.lr_sweep, (str, bytes)) or not hasattr(self.lr_sweep, "__iter__"):
            raise LgError(f"--lr-sweep must be a list of learning rates, got {type(self.lr_sweep).__name__}")
        for rate in self.lr_sweep:
            check_real(rate, "--lr-sweep: each learning rate", positive, lambda v: v > 0)
        check_whole(self.batch_size, "--batch-size", 1)
        check_real(self.weight_decay, "--weight-decay", "a finite number >= 0", lambda v: v >= 0)
        check_real(self.label_smoothing, "--label-smoothing", "a number in [0, 1)", lambda v: 0 <= v < 1)
        check_whole(self.eval_every, "--eval-every", 0)
        check_whole(self.eval_batch_size, "the evaluation batch size", 1)
        check_seed(self.seed)

    def interval(self) -> int:
        return self.eval_every if self.eval_every > 0 else max(1, self.steps // 10)

    def warmup_steps(self) -> int:
        return int(self.steps * DEFAULT_WARMUP_FRACTION) if self.warmup is None else self.warmup

    def rates(self) -> list[float]:
        return list(self.lr_sweep) or [self.lr]


@dataclass
class Candidate:
    """One row: a model to score, and where it came from."""

    name: str
    model: torch.nn.Module
    source: str  # a path, '-', or 'random' for the baseline
    architecture: dict
    notes: list[str] = field(default_factory=list)
    # The files beside its weights (`Checkpoint.companions`: a text model's
    # tokenizer) and where they are; a random baseline has its source row's.
    companions: dict = field(default_factory=dict)
    where: str = ""


def architecture_of(model: torch.nn.Module) -> dict:
    """A live model's sizes for the report, as its family's adapter gives them."""
    from .arch import adapter_of_model

    return adapter_of_model(model).architecture_of(model)


def model_task(model: torch.nn.Module) -> str:
    """What a live model does (one of `lgcli.arch.base.TASKS`), which says
    how `lg eval` feeds and scores it: as its family's adapter says.

    A Hugging Face model of a family lg has no adapter for (a library
    user's live model) is judged by transformers' naming convention for its
    heads, from the live class (what its forward returns), not the
    config's `architectures` (the class its weights were saved from): a
    ...ForCausalLM or ...LMHeadModel is a causal LM, a ...ForMaskedLM a
    masked LM, anything else an encoder lg cannot score."""
    from .arch import adapter_of_model

    try:
        return adapter_of_model(model).model_task(model)
    except LgError:
        if not any(cls.__name__ == "PreTrainedModel" for cls in type(model).__mro__):
            raise
    name = type(model).__name__
    if name.endswith(("ForCausalLM", "LMHeadModel")):
        return CAUSAL_LM
    if name.endswith("ForMaskedLM"):
        return MASKED_LM
    return TEXT_ENCODER


def common_task(candidates: list[Candidate]) -> str:
    """The one task of every candidate: a text encoder (nothing to score), or
    rows whose figures would not compare (images and text; causal and
    masked LMs), are refused in one line."""
    tasks = {candidate.name: model_task(candidate.model) for candidate in candidates}
    encoders = [name for name, task in tasks.items() if task == TEXT_ENCODER]
    if encoders:
        raise LgError(f"{encoders[0]} is a text encoder without a language-model head: lg eval scores image "
                      f"classifiers and causal or masked language models")
    if len(set(tasks.values())) > 1:
        listed = ", ".join(f"{name}: {task}" for name, task in tasks.items())
        why = ("image and text models cannot be scored on one dataset" if IMAGE_CLASSIFICATION in tasks.values()
               else "causal and masked language-model losses measure different things")
        raise LgError(f"the checkpoints do different tasks ({listed}): {why}; evaluate them separately")
    return next(iter(tasks.values()))


def fit_head(candidate: Candidate, num_classes: int, seed: int) -> None:
    """Give the model a head for the data's classes. A head for another class
    set carries nothing over, so it is re-initialised (seeded: every row that
    needs one gets the same draw for the same width)."""
    have = classes_of(candidate.model)
    if have == num_classes:
        return
    if num_classes < 2:  # a head of one class is right whatever the model computes: a score of nothing
        raise LgError(f"the data has one class, not the model's {counted(have, 'class')}: a new head for one class "
                      f"would score 100 % whatever the model computes; give images of two classes or more")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reset_head(candidate.model, num_classes)
    candidate.architecture["num_classes"] = num_classes
    candidate.notes.append(f"head re-initialised ({have} classes in the checkpoint, {num_classes} in the data)")


def load_candidates(paths: list[str], *, heads: int | None = None, baseline: str | None = None,
                    seed: int = 0, preprocessing: Overrides | None = None) -> list[Candidate]:
    """The rows: each checkpoint's model, its images prepared as it wants
    them (`lgcli.preprocessing`, `preprocessing` over it); a random baseline
    is prepared as the row it copies."""
    from lgcli.loading import create_model, load_model

    if not paths:
        raise UsageError("give at least one checkpoint to evaluate")
    if sum(p == "-" for p in paths) > 1:
        raise UsageError("stdin ('-') can be read only once")
    if baseline is not None and baseline != "random":
        raise UsageError(f"--baseline must be 'random', got {baseline!r}")
    candidates, specs = [], []
    for path in paths:
        checkpoint = read_checkpoint(path)
        model, spec = load_model(checkpoint, heads=heads)
        check_heads_known(spec, because="the model's outputs depend on them", flag="--heads",
                          where=checkpoint.label)
        attach(model, preprocessing_of(model, overrides=preprocessing, name=checkpoint.label))
        candidates.append(Candidate(_row_name(path, candidates), model, path, architecture_of(model),
                                    companions=checkpoint.companions,
                                    where="<stdin>" if path == "-" else shown(path)))
        specs.append(spec)
    task = common_task(candidates)  # before any baseline is built for a model that cannot be scored
    if baseline is None:
        return candidates
    # One random row per distinct architecture among the checkpoints (the
    # head is refitted to the data anyway, so it does not count).
    distinct: dict[str, tuple[ArchSpec, Candidate]] = {}
    for spec, candidate in zip(specs, list(candidates)):
        distinct.setdefault(_architecture_key(candidate.architecture), (spec, candidate))
    for spec, candidate in distinct.values():
        model = attach(create_model(spec, seed=seed), preprocessing_of(candidate.model, notify=lambda message: None))
        name = "random" if len(distinct) == 1 else f"random ({candidate.name})"
        note = (f"timm's random initialisation of {candidate.name}'s architecture" if task == IMAGE_CLASSIFICATION
                else f"the family's own random initialisation of {candidate.name}'s architecture")
        candidates.append(Candidate(name, model, "random", architecture_of(model), notes=[note],
                                    companions=candidate.companions, where=candidate.where))
    return candidates


def _row_name(path: str, existing: list[Candidate]) -> str:
    name = "stdin" if path == "-" else Path(path).name
    taken = {c.name for c in existing}
    return name if name not in taken else str(path)


def score(model: torch.nn.Module, data: ImageData | TextData, settings: ProbeSettings,
          examples: list | None = None, pace: PassPace | None = None) -> dict[str, float]:
    """The model's figures on the test split: top-1, top-5 and loss on
    images; loss and perplexity on text (with `examples`, each test
    example's too: `evaluate_accuracy`, `evaluate_text`). `pace` says how
    long the pass takes when that is long."""
    if isinstance(data, ImageData):
        return evaluate_accuracy(model, data.test, batch_size=settings.eval_batch_size, device=settings.device,
                                 examples=examples, pace=pace)
    return evaluate_text(model, data.test, batch_size=settings.eval_batch_size, device=settings.device,
                         examples=examples, pace=pace)


def probe_config(settings: ProbeSettings, lr: float, description: str) -> TrainConfig:
    """The training run of a probe at `lr`."""
    return TrainConfig(steps=settings.steps, batch_size=settings.batch_size, lr=lr,
                       weight_decay=settings.weight_decay, warmup_steps=settings.warmup_steps(),
                       label_smoothing=settings.label_smoothing, seed=settings.seed, device=settings.device,
                       progress=settings.progress, callback_every=settings.interval(), description=description)


def probe(candidate: Candidate, data: ImageData | TextData, settings: ProbeSettings, lr: float,
          pace: PassPace | None = None, first: bool = True) -> dict:
    """Fine-tune a copy of the candidate's model for `settings.steps` at `lr`,
    scoring the test split at step 0 and every `interval()` steps. With
    `pace`, the checkpoint's first scoring (step 0 of its `first` run) says
    how long it takes when long, and then every later one does too.

    Without steps the candidate's own model is scored, not a copy: scoring
    leaves the weights as they are, and a copy costs a second model's memory
    (and 1.4 s for a 135M-parameter one on the CPU). Scoring moves it to the
    settings' device and into eval mode; it is put back as it was
    (`left_as_it_was`)."""
    model = candidate.model if settings.steps == 0 else copy.deepcopy(candidate.model)
    measure = measure_of(data)
    curve: list[dict] = []
    examples: list = []

    def record(step: int, trained: torch.nn.Module) -> None:
        examples.clear()  # the last point's are the final model's
        first_pass = first and step == 0
        if pace is not None and not first_pass:
            pace.again(f"at step {step} (lr {lr:g})")
        scores = score(trained, data, settings, examples if settings.keep_examples else None,
                       pace if first_pass else None)
        curve.append({"step": step, **{k: scores[k] for k in measure.scores}})

    if settings.steps == 0:
        with left_as_it_was(model):
            record(0, model)
    else:
        losses = train(model, data.train, probe_config(settings, lr, f"{candidate.name} lr {lr:g}"),
                       on_step=record).losses
        # Each point's train loss: the mean over the steps since the previous point.
        for previous, point in zip(curve, curve[1:]):
            window = losses[previous["step"]:point["step"]]
            point["train_loss"] = sum(window) / len(window)
    final, key = curve[-1], measure.key
    return {"lr": lr, "curve": curve, **({"final_examples": list(examples)} if settings.keep_examples else {}),
            "final": {k: final[k] for k in measure.scores},
            "instinct": {k: curve[0][k] for k in measure.scores},
            f"mean_{key}": sum(p[key] for p in curve) / len(curve),
            # How much of its step-0 figure the model lost at worst on the
            # way: a rate too high for an initialisation shows here first.
            "dip": max([0.0] + [measure.shortfall(curve[0][key], p[key]) for p in curve[1:]])}


@contextlib.contextmanager
def left_as_it_was(model: torch.nn.Module) -> Iterator[None]:
    """Put the caller's model back as it was after the block, also when the
    block fails: on the device it was on (`Module.to`: the same parameter
    objects, their gradients too; a model spread over several devices is
    left on the one scoring gathered it on), and every module in the train
    or eval mode it was in (its own, not its parent's)."""
    modes = [(module, module.training) for module in model.modules()]
    devices = {tensor.device for tensor in chain(model.parameters(), model.buffers())}
    try:
        yield
    finally:
        if len(devices) == 1:
            model.to(next(iter(devices)))
        for module, training in modes:
            module.training = training


def steps_to_reach(curve: list[dict], target: float, measure: Measure = TOP1) -> float | None:
    """The step at which a learning curve first reaches `target` (top-1 at
    least that high, or with `LOSS` a loss at most that low), linearly
    interpolated between the scored points around the crossing; 0 when it
    starts there, None when it never does (the papers' "x-fewer-steps" figure
    compares these)."""
    key = measure.key
    previous = None
    for point in curve:
        if measure.reached(point[key], target):
            if previous is None:
                return float(point["step"])
            # previous had not reached the target and point has, so the change is non-zero
            # and has the sign of (target - previous): the fraction lies in (0, 1].
            change = point[key] - previous[key]
            fraction = (target - previous[key]) / change
            return previous["step"] + fraction * (point["step"] - previous["step"])
        previous = point
    return None


def _architecture_key(architecture: dict) -> str:
    # Rows of one architecture share a random baseline (the head is refitted
    # to the data anyway, so classes and parameter counts do not count).
    return json.dumps({k: v for k, v in architecture.items() if k not in ("num_classes", "parameters")},
                      sort_keys=True)


def add_steps_to_baseline(rows: list[dict], measure: Measure = TOP1) -> None:
    """Each probed row's steps to reach its architecture's random baseline's
    final figure (top-1, or the loss with `LOSS`: `steps_to_random_final`),
    and the speed-up: the baseline's own steps to that figure over the row's
    (`speedup`; None when the row never gets there). Rows without a baseline
    of their architecture are left as they are."""
    baselines = {_architecture_key(row["architecture"]): row for row in rows if row["source"] == "random"}
    for row in rows:
        baseline = baselines.get(_architecture_key(row["architecture"]))
        if baseline is None:
            continue
        target = baseline["final"][measure.key]
        own = steps_to_reach(row["curve"], target, measure)
        reference = steps_to_reach(baseline["curve"], target, measure)
        row["baseline"] = baseline["name"]
        row["steps_to_random_final"] = None if own is None else round(own, 1)
        # No ratio when the row never gets there, or starts there (step 0), or
        # when random itself is there at step 0 (a short or noisy run): 0 / n
        # would read as a 0.00x speed-up.
        row["speedup"] = None if not own or not reference else round(reference / own, 2)


def probe_row(candidate: Candidate, data: ImageData | TextData, settings: ProbeSettings,
              notify: Notify | None = None) -> dict:
    """A report row: the candidate probed at every rate of the settings (none
    without steps), reported at its best rate, with the sweep when there is
    one. With `notify`, its first scoring says how long it takes when long,
    and so then does each later one."""
    measure = measure_of(data)
    pace = PassPace(notify, f"{candidate.name}: scoring", "--test-subset") if notify is not None else None
    rates = settings.rates() if settings.steps else [None]
    runs = [probe(candidate, data, settings, lr, pace, first=index == 0) for index, lr in enumerate(rates)]
    best = None
    for run in runs:
        if best is None or measure.rank(run["final"]) > measure.rank(best["final"]):
            best = run
    mean = f"mean_{measure.key}"
    recipe = preprocessing_of(candidate.model, notify=lambda message: None) if isinstance(data, ImageData) else None
    row = {"name": candidate.name, "source": candidate.source, "architecture": candidate.architecture,
           **({"preprocessing": recipe.report()} if recipe is not None else {}), "notes": candidate.notes,
           "lr": best["lr"], "instinct": best["instinct"], "final": best["final"],
           mean: best[mean], "dip": best["dip"], "curve": best["curve"],
           **({"final_examples": best["final_examples"]} if "final_examples" in best else {})}
    if len(runs) > 1:
        row["sweep"] = [{k: r[k] for k in ("lr", "final", mean, "dip", "curve")} for r in runs]
    return row


def evaluate(paths: list[str], data: ImageData | TextData | str | os.PathLike | None,
             settings: ProbeSettings, *, baseline: str | None = None, heads: int | None = None,
             notify: Notify = notify_stderr, seq_len: int | None = None,
             subset: int | float | str | None = None, test_subset: int | float | str | None = None,
             test_fraction: float | None = None, preprocessing: Overrides | None = None) -> dict:
    """Score (and with `settings.steps`, probe) every checkpoint; the report
    is JSON-ready (schema in docs/eval.md).

    The checkpoints' task says what `data` is: image classifiers take an
    `ImageData`, or a name or folder `lgcli.data.load_data` reads (default
    fashion-mnist-mini); language models take a `TextData`, or a name, file
    or folder `lgcli.text.load_text` reads (default kjv-mini) with the
    checkpoints' shared tokenizer, in windows of `seq_len` tokens (default
    min(128, the models' positions)). `subset`, `test_subset` and
    `test_fraction` apply when the data are read here. Each image model's
    images are prepared as it wants them (`lgcli.preprocessing`), with
    `preprocessing` (--mean, --std, --interpolation) over every one."""
    settings.check()  # again: a settings object's fields can be changed after it was made
    if settings.steps == 0 and settings.lr_sweep:
        raise UsageError("--lr-sweep needs --steps: without fine-tuning there is no learning rate to sweep")
    if settings.steps and test_fraction == WHOLE_TEST_FRACTION:
        raise UsageError(f"--test-fraction 1 holds out all of the data, leaving nothing for --steps "
                         f"{settings.steps} to train on: give --steps 0 to score all of it as it is, or a "
                         f"fraction up to 0.9")
    if seq_len is not None:
        check_whole(seq_len, "--seq-len", 1)
    # A mistyped path is said before torch, a device or a model is paid for.
    for path in paths:
        check_source(path)
    check_data_source(data)
    device_note = auto_device_note(settings.device)
    settings = dataclasses.replace(settings, device=concrete_device(settings.device))
    candidates = load_candidates(paths, heads=heads, baseline=baseline, seed=settings.seed,
                                 preprocessing=preprocessing)
    task = common_task(candidates)
    if task == IMAGE_CLASSIFICATION:
        if data is None:
            check_fits_default_data(candidates)
        data = classifier_data(data, seq_len=seq_len, subset=subset, test_subset=test_subset,
                           test_fraction=test_fraction, seed=settings.seed)
        for candidate in candidates:
            check_channels(data, model_input(candidate.model)[0])
        data = in_models_label_order(data, [class_names(candidate.model) for candidate in candidates], notify)
    else:
        if preprocessing:
            raise UsageError("--mean, --std and --interpolation prepare images; these checkpoints are language models")
        data = _text_data(candidates, task, data, seq_len=seq_len, subset=subset, test_subset=test_subset,
                          test_fraction=test_fraction, seed=settings.seed, notify=notify)
    if settings.steps and len(data.train) < settings.batch_size:
        unit = "images" if task == IMAGE_CLASSIFICATION else "windows"
        raise LgError(f"the train split has {len(data.train)} {unit}, fewer than one batch of "
                      f"{settings.batch_size} (lower --batch-size or raise --subset)")
    if device_note:
        notify(device_note)
    rows = []
    for candidate in candidates:
        if task == IMAGE_CLASSIFICATION:
            fit_head(candidate, data.num_classes, settings.seed)
        for message in candidate.notes:
            if message.startswith("head"):
                notify(f"{candidate.name}: {message}")
        rows.append(probe_row(candidate, data, settings, notify))
    if settings.steps:
        add_steps_to_baseline(rows, measure_of(data))
    return {"version": REPORT_VERSION, "task": task, "data": data.describe(),
            "settings": {**{k: v for k, v in asdict(settings).items() if k != "progress"},
                         "warmup": settings.warmup_steps()}, "rows": rows}


# The classes of the default data (fashion-mnist-mini).
DEFAULT_DATA_CLASSES = len(FASHION_MNIST_CLASSES)


def check_fits_default_data(candidates: list[Candidate]) -> None:
    """The default data (fashion-mnist-mini) is for lg's example-shaped models
    (its 10 classes): a classifier of other classes would be scored with a
    new, untrained head, a figure that says nothing of the checkpoint. Such a
    model is evaluated on the data named with --data (its own; or
    fashion-mnist-mini by name, to probe it there with a new head)."""
    for candidate in candidates:
        model_input(candidate.model)  # a model of features has no classes to count: said as such first
        classes = classes_of(candidate.model)
        if classes != DEFAULT_DATA_CLASSES:
            raise UsageError(f"{candidate.where or candidate.name} has {counted(classes, 'class')}; the default data "
                             f"({DEFAULT_DATA}, for lg's example models) has {DEFAULT_DATA_CLASSES}: give its own "
                             f"data with --data (an image folder of its classes), or --data {DEFAULT_DATA} to probe "
                             f"it there with a new head")


def classifier_data(data: ImageData | TextData | str | os.PathLike | None, *, seq_len: int | None,
                    subset, test_subset, test_fraction: float | None, seed: int) -> ImageData:
    """The image classifiers' data: as given, or read (lg eval's and lg bench's);
    a text named is refused as one."""
    if seq_len is not None:
        raise UsageError("--seq-len is for language models; these checkpoints are image classifiers")
    if isinstance(data, ImageData):
        return data
    if isinstance(data, TextData):
        raise LgError(f"{data.name} is text; these checkpoints are image classifiers")
    source = DEFAULT_DATA if data is None else os.fspath(data)
    if source in builtin_texts():
        raise LgError(f"--data {source} is a text; image classifiers take an image folder or an image dataset "
                      f"(fashion-mnist-mini, fashion-mnist, mnist)")
    return load_data(source, subset=subset, test_subset=test_subset, seed=seed,
                     test_fraction=DEFAULT_IMAGE_TEST_FRACTION if test_fraction is None else test_fraction)


def _text_data(candidates: list[Candidate], task: str, data: ImageData | TextData | str | os.PathLike | None,
               *, seq_len: int | None, subset, test_subset, test_fraction: float | None, seed: int,
               notify: Notify) -> TextData:
    """The language models' data, cut into windows for their shared tokenizer."""
    if isinstance(data, ImageData):
        raise LgError(f"{data.name} is an image dataset; these checkpoints are language models")
    return text_data_for([(c.name, c.model, c.companions, c.where) for c in candidates], task, data,
                         seq_len=seq_len, subset=subset, test_subset=test_subset, test_fraction=test_fraction,
                         seed=seed, notify=notify)
