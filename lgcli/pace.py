"""How long a pass over data will take, said once when it is long.

Scoring a real model on a CPU (SmolLM2's held-out windows, a DINOv2's
10,000 test images) takes minutes, and a command that prints nothing for
that long looks stuck. `PassPace` times a pass's first batch and, when the
rest will take over ANNOUNCE_PASS_ABOVE_SECONDS, says how long, and with a
flag (--test-subset) how many examples take about that long a pass.
"""

from __future__ import annotations

import time
from typing import Callable

# A pass its first batch says will take longer than this is announced.
ANNOUNCE_PASS_ABOVE_SECONDS = 30.0
# lg eval's probe trains this many steps (`--steps 100`, the hint after a resize).
PROBE_STEPS = 100
# A probe the hint expects to take longer than this on the CPU is said to be long ("a few minutes").
SLOW_PROBE_SECONDS = 180.0
# The work of an image model's probe step, its parameters x its input's pixels
# (a training step's work grows with both, one token per patch), that one CPU
# core (a thread of torch's) gets through in a second. Measured on 2 cores
# (batch 64): a DINOv2-S of 4 layers at 112 px (9.2e10) took 3.99 s a step,
# 1.15e10 a core-second; one of 6 layers at 224 px (5.5e11) 16 s, 1.7e10.
# Rounded below the slower, so that a machine shared with other work is not
# promised more: lg's example ViT (1.2M x 28 x 28, 9.4e8) probes in seconds.
PROBE_WORK_PER_CORE_SECOND = 1e10
clock = time.perf_counter


def probe_seconds(work: float, threads: int | None = None) -> float:
    """About how long lg eval's 100-step probe of an image model of `work`
    (parameters x input pixels) takes on `threads` CPU threads (default:
    torch's, what lg eval will use)."""
    if threads is None:
        from .lazy import torch

        threads = torch.get_num_threads()
    return PROBE_STEPS * work / (PROBE_WORK_PER_CORE_SECOND * max(1, threads))


def slow_cpu_probe(threads: int | None = None) -> float:
    """The work past which the probe takes over SLOW_PROBE_SECONDS here."""
    return SLOW_PROBE_SECONDS / probe_seconds(1.0, threads)


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: 40 s, 12 min, 3.5 h."""
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else (
        f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s")


class PassPace:
    """Said through `notify` as "{what} on N {unit}: about T more (FLAG n:
    about 30 s a pass)" once the first batch of a pass is done, when the rest
    is long. The evaluator calls `begin` before its pass and `batch_done`
    after each batch; one object serves several passes. Once a pass was
    said to be long, `again` says how long another of its size takes
    (the passes of a probe's curve), so none of them is silent."""

    def __init__(self, notify: Callable[[str], None] | None, what: str, flag: str | None = None) -> None:
        self.notify, self.what, self.flag = notify, what, flag
        self.examples = self.batch_size = 0
        self.unit, self.started, self.done = "", 0.0, True
        self.pass_seconds: float | None = None  # a long pass's whole time, once said

    def begin(self, examples: int, batch_size: int, unit: str) -> "PassPace":
        self.examples, self.batch_size, self.unit = examples, batch_size, unit
        self.started, self.done = clock(), False
        return self

    def batch_done(self) -> None:
        if self.done or self.notify is None:
            return
        self.done = True
        first = clock() - self.started
        per_example = first / max(1, min(self.batch_size, self.examples))
        left = per_example * max(0, self.examples - self.batch_size)
        if left <= ANNOUNCE_PASS_ABOVE_SECONDS:
            return
        self.pass_seconds = first + left
        fewer = max(1, int(ANNOUNCE_PASS_ABOVE_SECONDS / per_example))
        hint = f" ({self.flag} {fewer}: about {duration_text(ANNOUNCE_PASS_ABOVE_SECONDS)} a pass)" if self.flag else ""
        self.notify(f"{self.what} on {self.examples:,} {self.unit}: about {duration_text(left)} more{hint}")

    def again(self, label: str) -> None:
        """Before another pass like the first: "{what} {label}: about T",
        when the first was said to be long; nothing otherwise."""
        if self.notify is not None and self.pass_seconds is not None:
            self.notify(f"{self.what} {label}: about {duration_text(self.pass_seconds)}")


__all__ = ["ANNOUNCE_PASS_ABOVE_SECONDS", "PassPace", "duration_text", "probe_seconds", "slow_cpu_probe"]
