"""How much memory a language model's training step needs, said before the
first step when the machine does not have it.

A step over token windows holds the logits (batch x positions x vocabulary,
float32) many times over: the logits, their log-softmax, the loss's
intermediates and the gradients flowing back through them, and with a
teacher its logits and the KL's terms too. For a real vocabulary this
dwarfs the model: SmolLM2-135M (49,152 tokens) at lg's default batch of 64
windows of 128 tokens holds 1.6 GB per copy of its logits, and the kernel
kills the process, without a word, once the copies outgrow the memory. lg
says so first, on the CPU, with the batch size that would fit.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

from .checkpoint.memory import available_memory, memory_text
from .devices import concrete_device
from .errors import LgError
from .lazy import torch
from .pace import duration_text

# Copies of a step's float32 logits held at its peak, measured with
# /usr/bin/time on SmolLM2-135M on the CPU (2 steps of 128-token windows,
# batch 4 against 16; 2026-11-27): `lg eval`'s probe (cross-entropy) peaked
# 3.31 GB higher at 12 more windows, 11.0 copies of their 302 MB of logits;
# `lg distill` (the teacher's logits and the KL besides) 4.56 GB, 15.1 copies.
STEP_LOGIT_COPIES = 11
STEP_TEACHER_COPIES = 4
# The optimiser's state and the gradients: AdamW's two moments and one gradient per trained parameter.
STATE_COPIES = 3

_said: set[tuple[Any, ...]] = set()


@dataclass(frozen=True)
class StepNeed:
    """A step over token windows, against the CPU's free memory (bytes)."""

    per_window: int  # the logits' copies of one window
    state: int  # the optimiser's state and the gradients
    free: int
    positions: int
    vocabulary: int
    with_teacher: bool

    def needs(self, batch_size: int) -> int:
        return self.state + batch_size * self.per_window

    def fits(self) -> int:
        """The largest batch whose step fits (0: none)."""
        return max(0, (self.free - self.state) // self.per_window)

    def too_big(self, batch_size: int, flag: str) -> str:
        """The line that says a step of `batch_size` does not fit, and what does."""
        fits = self.fits()
        remedy = f"{flag} {fits} would fit" if fits >= 1 else "no batch fits: use a machine with more memory"
        return (f"lg: a step of {batch_size} windows of {self.positions} tokens over a {self.vocabulary:,}-token "
                f"vocabulary needs about {memory_text(self.needs(batch_size))} (logits, gradients and the "
                f"optimiser's state) and the CPU has {memory_text(self.free)} free: it may run out of memory "
                f"({remedy})")

    def said_once(self, batch_size: int) -> bool:
        """True the first time this process says it of this batch and data."""
        key = (batch_size, self.positions, self.vocabulary, self.with_teacher)
        first = key not in _said
        _said.add(key)
        return first


def step_need(model: torch.nn.Module, data: Any, teacher: torch.nn.Module | None, device: torch.device,
              trained: int | None = None) -> StepNeed | None:
    """What a step over `data`'s token windows through `model` (a
    transformers language model) needs, or None where lg does not judge:
    images, a model of no output embeddings, memory that cannot be read,
    or a GPU (a step too big fails there with CUDA's own out-of-memory
    error, not the kernel's silent kill, and the copies were measured on
    the CPU). `trained`: the parameters the optimiser updates (a fit that
    trains some tensors only); default: every parameter that requires a
    gradient."""
    inputs = getattr(data, "inputs", None)
    heads = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if device.type != "cpu" or not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 \
            or getattr(heads, "weight", None) is None:
        return None
    free = available_memory()
    if free is None:
        return None
    if trained is None:
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    positions, vocabulary = int(inputs.shape[1]), int(heads.weight.shape[0])
    per_window = positions * vocabulary * 4 * (STEP_LOGIT_COPIES + (STEP_TEACHER_COPIES if teacher is not None else 0))
    return StepNeed(per_window, STATE_COPIES * 4 * trained, free, positions, vocabulary, teacher is not None)


def step_memory_warning(model: torch.nn.Module, data: Any, batch_size: int, teacher: torch.nn.Module | None,
                        device: torch.device, trained: int | None = None, flag: str = "--batch-size") -> str | None:
    """One line when a step of `batch_size` windows would need more memory
    than the CPU has free (`step_need`), else None (also a case already said
    in this process). `flag`: the option that set the batch (`lg bench
    --condense-batch-size`)."""
    need = step_need(model, data, teacher, device, trained)
    if need is None or need.needs(batch_size) <= need.free or not need.said_once(batch_size):
        return None
    return need.too_big(batch_size, flag)


# A dry run times steps of at most this many windows or images first, and
# doubles the batch towards the one asked while a step of the next would take
# at most QUICK_STEP_SECONDS (timing it costs a few of them): SmolLM2-135M's
# step of lg's default 64 windows, beside its teacher, takes minutes on a CPU
# and gigabytes of logits, one of 4 about 4-7 seconds. A batch not reached is
# scaled to (`scaled_step`) through two timed ones: the second is timed when
# its step takes at most SECOND_STEP_SECONDS, since a step's fixed part (the
# optimiser, the teacher's setup) made a 4-layer SmolLM2's step of 64 windows
# 2.6 times one of 4, not 16.
FIRST_TIMED_BATCH, QUICK_STEP_SECONDS, SECOND_STEP_SECONDS = 4, 2.0, 15.0
# Steps timed at each batch on the way to the one asked (after its first, uncounted).
STEPS_ON_THE_WAY = 1
TimeAt = Callable[[int, int], "tuple[float, int]"]


def largest_batch(model: torch.nn.Module, data: Any, batch_size: int, teacher: torch.nn.Module | None,
                  device: str, flag: str = "--batch-size") -> tuple[int, StepNeed | None]:
    """The largest batch up to `batch_size` whose step fits in the CPU's
    memory (`step_need`), and the need where `batch_size` does not fit. None
    fits: an `LgError`."""
    need = step_need(model, data, teacher, torch.device("cpu")) if concrete_device(device) == "cpu" else None
    if need is None or need.needs(batch_size) <= need.free:
        return batch_size, None
    if need.fits() == 0:
        raise LgError(need.too_big(batch_size, flag).removeprefix("lg: "))
    return need.fits(), need


def scaled_step(points: list[tuple[int, float]], batch_size: int) -> float:
    """The seconds a step of `batch_size` takes, from (batch, seconds a step)
    timed at smaller batches: the line through the last two (a step's fixed
    part, the optimiser's update, and a part per example), kept between the
    last one's time and that time scaled in proportion (no fixed part), the
    most it can be; one point: scaled in proportion."""
    batch, seconds = points[-1]
    most = seconds * batch_size / batch
    if len(points) < 2:
        return most
    smaller, before = points[-2]
    per_example = max(0.0, (seconds - before) / (batch - smaller))
    return min(most, max(seconds, seconds + per_example * (batch_size - batch)))


def time_dry_run_step(time_at: TimeAt, model: torch.nn.Module, data: Any, batch_size: int,
                      teacher: torch.nn.Module | None, device: str, steps: int, flag: str = "--batch-size",
                      timing: dict[str, Any] | None = None) -> tuple[float, int]:
    """(seconds a step of `batch_size` takes, steps timed) for a dry run,
    from `time_at(batch, steps)` (the seconds a step of `batch` took, and
    the steps timed): first at FIRST_TIMED_BATCH, then doubling up to the
    batch asked while a step stays quick (the second: not slow), never past the largest batch that
    fits in memory (`largest_batch`); a batch not reached is scaled to and
    said on stderr. `timing`, where given, gets the batch timed."""
    largest, need = largest_batch(model, data, batch_size, teacher, device, flag)
    top = min(batch_size, largest)
    batch, points = min(FIRST_TIMED_BATCH, top), []
    while True:
        per_step, timed = time_at(batch, steps if batch == top else STEPS_ON_THE_WAY)
        points.append((batch, per_step))
        following = min(2 * batch, top)
        longest = QUICK_STEP_SECONDS if len(points) > 1 else SECOND_STEP_SECONDS
        if batch == top or per_step * following / batch > longest:
            break
        batch = following
    if timing is not None:
        timing["batch_size"] = batch
    if batch == batch_size:
        return per_step, timed
    estimate = scaled_step(points, batch_size)
    if need is not None:  # the step asked does not fit: said once in a process, as the training loop says it
        why = need.too_big(batch_size, flag) if need.said_once(batch_size) else None
    else:  # it fits, but timing it is long
        why = None if (batch, batch_size) in _said else \
            f"lg: dry run: a step of {batch_size} would take about {duration_text(estimate)}"
        _said.add((batch, batch_size))
    if why:
        print(f"{why}; timed at a batch of {batch}, scaled to {batch_size}", file=sys.stderr, flush=True)
    return estimate, timed
