"""What `lg condense`'s and `lg distill`'s training runs share: one
dataclass, checked with the messages the CLI's flags get."""

from __future__ import annotations

from dataclasses import dataclass

from .checks import check_real, check_seed, check_whole


@dataclass
class RunSettings:
    """What `lg condense`'s and `lg distill`'s training runs share, checked
    (`check`) with the messages the CLI's flags get; each command's settings
    add its steps, batch, rate and loss (`CondenseSettings`, `DistillSettings`)."""

    warmup: int | None = None  # None: the command's share of the steps
    weight_decay: float = 0.05
    seed: int = 0
    device: str = "auto"  # CUDA when present, else the CPU
    checkpoint: str | None = None  # a training checkpoint to write (and --resume from)
    checkpoint_every: int = 0
    resume: bool = False
    force: bool = False
    progress: bool = True
    # The stopping rule (None: run every step): stop once the trained model
    # scores `until` of the teacher on a split held out of the train data, or
    # has not improved for a few checks; checked every `until_every` steps.
    # The steps asked for are then the most it runs.
    until: float | None = None
    until_every: int = 100

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        if self.warmup is not None:
            check_whole(self.warmup, "--warmup", 0)
        check_real(self.weight_decay, "--weight-decay", "a finite number >= 0", lambda v: v >= 0)
        check_seed(self.seed)
        check_whole(self.checkpoint_every, "--checkpoint-every", 0)
        if self.until is not None:
            check_real(self.until, "--until", "a fraction in (0, 1]", lambda v: 0 < v <= 1)
        check_whole(self.until_every, "--until-every", 1)


__all__ = ["RunSettings"]
