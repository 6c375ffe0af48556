"""What `lg condense`'s and `lg distill`'s training runs share: one
dataclass, checked with the messages the CLI's flags get, and the check
that a --resume continues the run its training checkpoint was made from
(`check_origin`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checks import check_real, check_seed, check_whole
from .errors import LgError, one_line


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


def check_origin(where: str, saved: Any, origin: dict[str, Any]) -> None:
    """Refuse to resume a checkpoint made from another teacher, data, kind or
    shape than this run's (`lgcli.train.TrainConfig.origin`), naming each difference."""
    if not isinstance(saved, dict) or not saved:
        raise LgError(f"cannot resume {where}: it does not record what it was made from (teacher, data, kind), "
                      f"so lg cannot tell it continues this run; start over with --force")
    differences = []
    for name in sorted(set(saved) | set(origin)):
        before, now = saved.get(name), origin.get(name)
        if before == now:
            continue
        if isinstance(before, dict) and isinstance(now, dict):
            inner = [f"{name} {key} {_brief(before.get(key))} -> {_brief(now.get(key))}"
                     for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key)]
            differences += inner
        else:
            differences.append(f"{name} {_brief(before)} -> {_brief(now)}")
    if differences:
        raise LgError(f"cannot resume {where}: it was made from something else than this run "
                      f"({one_line('; '.join(differences))}); give its own teacher, data and options, "
                      f"or --force to start over")


def _brief(value: Any) -> str:
    """A recorded value as a difference names it: a sha256 by its first 12 digits."""
    text = str(value)
    return text[:12] + "..." if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


__all__ = ["RunSettings", "check_origin"]
