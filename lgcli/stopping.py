"""`--until F` of lg condense and lg distill: the split held out of the train
split to score the model being trained on, and the rule that stops training
once it reaches F of the teacher's figure there (or brings no new best)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from .accuracy import evaluate_accuracy
from .errors import LgError
from .images import ImageData
from .lazy import torch
from .text import TextData, TokenWindows, evaluate_text
from .train import StepCallback

Notify = Callable[[str], None]

# The stopping rule's held-out split: this share of the train split, at most
# UNTIL_HELD_OUT_MAX examples (images or windows), class-balanced for images.
UNTIL_HELD_OUT_FRACTION = 0.05
UNTIL_HELD_OUT_MAX = 2000
# Checks without a new best before the stopping rule gives up.
UNTIL_PATIENCE = 3


def hold_out(data: ImageData | TextData, seed: int) -> tuple[ImageData | TextData, Any]:
    """The stopping rule's split: UNTIL_HELD_OUT_FRACTION of the train split
    (at most UNTIL_HELD_OUT_MAX; class-balanced for images, seeded), taken
    out of what is trained on. Returns (the data without it, the split)."""
    from .data import balanced_subset

    total = len(data.train)
    count = max(1, min(UNTIL_HELD_OUT_MAX, int(total * UNTIL_HELD_OUT_FRACTION)))
    if total - count < 1:
        raise LgError(f"--until holds out part of the train split, which has only {total} {unit_of(data)}")
    if isinstance(data, ImageData):
        chosen = balanced_subset(data.train.labels, count, seed)
    else:
        chosen = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:count].tolist()
    taken = set(chosen)
    kept = [index for index in range(total) if index not in taken]
    return dataclasses.replace(data, train=data.train.subset(kept)), data.train.subset(sorted(chosen))


class StoppingRule:
    """`--until F`: every `every` steps (and at step 0), score the auxiliary
    model on the held-out split; stop once it reaches F of the teacher's
    figure there (images: its top-1 over the teacher's; text: the teacher's
    loss over its own), or once UNTIL_PATIENCE checks in a row bring no new
    best. The teacher is scored once. A training checkpoint keeps the rest
    (`state_dict`), so that a --resume decides as the uninterrupted run did."""

    def __init__(self, until: float, every: int, held_out, teacher: torch.nn.Module, device: str, notify: Notify,
                 command: str = "condense"):
        self.until, self.every, self.held_out, self.device, self.notify = until, every, held_out, device, notify
        self.command = command  # who stops, in its message (lg distill uses the rule too)
        self.teacher_figure = self._figure(teacher)
        if not isinstance(held_out, TokenWindows) and self.teacher_figure == 0:  # every fraction of 0 is reached
            raise LgError(f"--until measures top-1 as a fraction of the teacher's on {len(held_out)} held-out "
                          f"images, and the teacher scores 0 % there: a teacher of the data's classes is needed "
                          f"(or train for --steps without --until)")
        self.history: list[dict[str, float]] = []
        self.best = -math.inf
        self.since_best = 0
        self.reason = "step cap"

    def _figure(self, model: torch.nn.Module) -> float:
        if isinstance(self.held_out, TokenWindows):
            return evaluate_text(model, self.held_out, device=self.device)["loss"]
        return evaluate_accuracy(model, self.held_out, device=self.device)["top1"]

    def ratio(self, figure: float) -> float:
        """The auxiliary model's figure as a fraction of the teacher's."""
        if isinstance(self.held_out, TokenWindows):
            return self.teacher_figure / figure if figure > 0 else math.inf
        return figure / self.teacher_figure  # a teacher's 0 % is refused when the rule is made

    def check(self, step: int, model: torch.nn.Module) -> bool:
        ratio = self.ratio(self._figure(model))
        # Recorded in the output's metadata, JSON, which has no inf: a loss of exactly 0 (a ratio of inf) is null.
        self.history.append({"step": step, "of_teacher": round(ratio, 4) if math.isfinite(ratio) else None})
        if step == 0:  # where it starts; never a stop: a learngene is what condensing trained
            self.best = ratio
            return False
        if ratio >= self.until:
            self.reason = f"reached {self.until:g} of the teacher"
        elif ratio > self.best:
            self.best, self.since_best = ratio, 0
            return False
        else:
            self.since_best += 1
            if self.since_best < UNTIL_PATIENCE:
                return False
            self.reason = f"no new best in {UNTIL_PATIENCE} checks"
        self.notify(f"{self.command}: stopping at step {step}: {self.reason} ({ratio:.3f} of its figure on the "
                    f"held-out split)")
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "best": self.best, "since_best": self.since_best, "reason": self.reason}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # KeyError, TypeError, ValueError when damaged
        self.history = [{"step": int(c["step"]), "of_teacher": None if c["of_teacher"] is None else
                         float(c["of_teacher"])} for c in state["history"]]
        self.best, self.since_best, self.reason = float(state["best"]), int(state["since_best"]), str(state["reason"])

    def wrap(self, on_step: StepCallback | None) -> StepCallback:
        def callback(step: int, model: torch.nn.Module) -> bool:
            if on_step is not None:
                on_step(step, model)
            return step % self.every == 0 and self.check(step, model)

        return callback

    def report(self, steps_run: int, cap: int) -> dict[str, Any]:
        return {"fraction": self.until, "every": self.every, "held_out": len(self.held_out),
                "teacher": round(self.teacher_figure, 4), "steps_run": steps_run, "cap": cap,
                "stopped": self.reason if steps_run < cap else "step cap", "checks": self.history}


def unit_of(data: ImageData | TextData) -> str:
    return "images" if isinstance(data, ImageData) else "windows"
