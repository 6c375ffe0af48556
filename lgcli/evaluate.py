"""Accuracy, and the init-quality probe: how fast does an initialised model learn?

`evaluate(...)` scores each checkpoint on the test split (top-1, top-5, loss).
With ``steps > 0`` it first fine-tunes a fresh copy of each for that many
steps with `lgcli.train` (the same data order, seed and hyper-parameters for
every row, so rows differ only by their initialisation), scoring the test
split at step 0 (the learngene papers' "instinct") and at intervals. With a
learning-rate sweep each row is run at every rate and reported at its best, so
no initialisation wins or loses by the learning rate alone.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from lgcli.data import ImageData, check_channels, check_real, check_seed, check_whole
from lgcli.errors import LgError, notify_stderr
from lgcli.stack import ArchSpec
from lgcli.train import TrainConfig, evaluate_accuracy, model_input, train

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
    device: str = "cpu"
    progress: bool = True

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


def architecture_of(model: torch.nn.Module) -> dict:
    """A live model's sizes for the report, as its family's adapter gives them."""
    from .arch import adapter_of_model

    return adapter_of_model(model).architecture_of(model)


def fit_head(candidate: Candidate, num_classes: int, seed: int) -> None:
    """Give the model a head for the data's classes. A head for another class
    set carries nothing over, so it is re-initialised (seeded: every row that
    needs one gets the same draw for the same width)."""
    have = int(candidate.model.num_classes)
    if have == num_classes:
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        candidate.model.reset_classifier(num_classes)
    candidate.architecture["num_classes"] = num_classes
    candidate.notes.append(f"head re-initialised ({have} classes in the checkpoint, {num_classes} in the data)")


def load_candidates(paths: list[str], *, heads: int | None = None, baseline: str | None = None,
                    seed: int = 0) -> list[Candidate]:
    from lgcli.api import create_model, load_model

    if not paths:
        raise LgError("give at least one checkpoint to evaluate")
    if sum(p == "-" for p in paths) > 1:
        raise LgError("stdin ('-') can be read only once")
    candidates, specs = [], []
    for path in paths:
        model, spec = load_model(path, heads=heads)
        candidates.append(Candidate(_row_name(path, candidates), model, path, architecture_of(model)))
        specs.append(spec)
    if baseline is None:
        return candidates
    if baseline != "random":
        raise LgError(f"--baseline must be 'random', got {baseline!r}")
    # One random row per distinct architecture among the checkpoints (the
    # head is refitted to the data anyway, so it does not count).
    distinct: dict[str, tuple[ArchSpec, Candidate]] = {}
    for spec, candidate in zip(specs, list(candidates)):
        distinct.setdefault(_architecture_key(candidate.architecture), (spec, candidate))
    for spec, candidate in distinct.values():
        model = create_model(spec, seed=seed)
        name = "random" if len(distinct) == 1 else f"random ({candidate.name})"
        candidates.append(Candidate(name, model, "random", architecture_of(model),
                                    notes=[f"timm's random initialisation of {candidate.name}'s architecture"]))
    return candidates


def _row_name(path: str, existing: list[Candidate]) -> str:
    name = "stdin" if path == "-" else Path(path).name
    taken = {c.name for c in existing}
    return name if name not in taken else str(path)


def probe(candidate: Candidate, data: ImageData, settings: ProbeSettings, lr: float) -> dict:
    """Fine-tune a copy of the candidate's model for `settings.steps` at `lr`,
    scoring the test split at step 0 and every `interval()` steps."""
    model = copy.deepcopy(candidate.model)
    curve: list[dict] = []

    def record(step: int, trained: torch.nn.Module) -> None:
        scores = evaluate_accuracy(trained, data.test, batch_size=settings.eval_batch_size, device=settings.device)
        curve.append({"step": step, "top1": scores["top1"], "top5": scores["top5"], "loss": scores["loss"]})

    if settings.steps == 0:
        record(0, model)
    else:
        config = TrainConfig(steps=settings.steps, batch_size=settings.batch_size, lr=lr,
                             weight_decay=settings.weight_decay, warmup_steps=settings.warmup_steps(),
                             label_smoothing=settings.label_smoothing, seed=settings.seed, device=settings.device,
                             progress=settings.progress, callback_every=settings.interval(),
                             description=f"{candidate.name} lr {lr:g}")
        losses = train(model, data.train, config, on_step=record).losses
        # Each point's train loss: the mean over the steps since the previous point.
        for previous, point in zip(curve, curve[1:]):
            window = losses[previous["step"]:point["step"]]
            point["train_loss"] = sum(window) / len(window)
    final = curve[-1]
    return {"lr": lr, "curve": curve,
            "final": {k: final[k] for k in ("top1", "top5", "loss")},
            "instinct": {k: curve[0][k] for k in ("top1", "top5", "loss")},
            "mean_top1": sum(p["top1"] for p in curve) / len(curve),
            # How much of its step-0 accuracy the model lost at worst on the
            # way: a rate too high for an initialisation shows here first.
            "dip": max([0.0] + [curve[0]["top1"] - p["top1"] for p in curve[1:]])}


def steps_to_reach(curve: list[dict], target: float) -> float | None:
    """The step at which a learning curve first reaches `target` top-1, linearly
    interpolated between the scored points around the crossing; 0 when it
    starts there, None when it never does (the papers' "x-fewer-steps" figure
    compares these)."""
    previous = None
    for point in curve:
        if point["top1"] >= target:
            if previous is None:
                return float(point["step"])
            rise = point["top1"] - previous["top1"]
            fraction = (target - previous["top1"]) / rise
            return previous["step"] + fraction * (point["step"] - previous["step"])
        previous = point
    return None


def _architecture_key(architecture: dict) -> str:
    # Rows of one architecture share a random baseline (the head is refitted
    # to the data anyway, so classes and parameter counts do not count).
    return json.dumps({k: v for k, v in architecture.items() if k not in ("num_classes", "parameters")},
                      sort_keys=True)


def add_steps_to_baseline(rows: list[dict]) -> None:
    """Each probed row's steps to reach its architecture's random baseline's
    final top-1 (`steps_to_random_final`), and the speed-up: the baseline's own
    steps to that accuracy over the row's (`speedup`; None when the row never
    gets there). Rows without a baseline of their architecture are left as they are."""
    baselines = {_architecture_key(row["architecture"]): row for row in rows if row["source"] == "random"}
    for row in rows:
        baseline = baselines.get(_architecture_key(row["architecture"]))
        if baseline is None:
            continue
        target = baseline["final"]["top1"]
        own, reference = steps_to_reach(row["curve"], target), steps_to_reach(baseline["curve"], target)
        row["baseline"] = baseline["name"]
        row["steps_to_random_final"] = None if own is None else round(own, 1)
        # No ratio when the row never gets there, or starts there (step 0).
        row["speedup"] = None if not own or reference is None else round(reference / own, 2)


def probe_row(candidate: Candidate, data: ImageData, settings: ProbeSettings) -> dict:
    """A report row: the candidate probed at every rate of the settings (none
    without steps), reported at its best rate, with the sweep when there is one."""
    runs = [probe(candidate, data, settings, lr) for lr in (settings.rates() if settings.steps else [None])]
    best = None
    for run in runs:
        if _better(run, best):
            best = run
    row = {"name": candidate.name, "source": candidate.source, "architecture": candidate.architecture,
           "notes": candidate.notes, "lr": best["lr"], "instinct": best["instinct"], "final": best["final"],
           "mean_top1": best["mean_top1"], "dip": best["dip"], "curve": best["curve"]}
    if len(runs) > 1:
        row["sweep"] = [{k: r[k] for k in ("lr", "final", "mean_top1", "dip", "curve")} for r in runs]
    return row


def _better(run: dict, best: dict | None) -> bool:
    # Best by final top-1, then by final loss: a sweep picks what a user
    # tuning one learning rate would pick.
    return best is None or (run["final"]["top1"], -run["final"]["loss"]) > (best["final"]["top1"],
                                                                           -best["final"]["loss"])


def evaluate(paths: list[str], data: ImageData, settings: ProbeSettings, *, baseline: str | None = None,
             heads: int | None = None, notify: Notify = notify_stderr) -> dict:
    """Score (and with `settings.steps`, probe) every checkpoint; the report
    is JSON-ready (schema in docs/eval.md)."""
    settings.check()  # again: a settings object's fields can be changed after it was made
    if settings.steps == 0 and settings.lr_sweep:
        raise LgError("--lr-sweep needs --steps: without fine-tuning there is no learning rate to sweep")
    candidates = load_candidates(paths, heads=heads, baseline=baseline, seed=settings.seed)
    for candidate in candidates:
        check_channels(data, model_input(candidate.model)[0])
    if settings.steps and len(data.train) < settings.batch_size:
        raise LgError(f"the train split has {len(data.train)} images, fewer than one batch of "
                      f"{settings.batch_size} (lower --batch-size or raise --subset)")
    rows = []
    for candidate in candidates:
        fit_head(candidate, data.num_classes, settings.seed)
        for message in candidate.notes:
            if message.startswith("head"):
                notify(f"{candidate.name}: {message}")
        rows.append(probe_row(candidate, data, settings))
    if settings.steps:
        add_steps_to_baseline(rows)
    return {"version": REPORT_VERSION, "data": data.describe(),
            "settings": {**{k: v for k, v in asdict(settings).items() if k != "progress"},
                         "warmup": settings.warmup_steps()}, "rows": rows}
