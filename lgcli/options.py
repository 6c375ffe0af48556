"""Options that a method or a learngene kind declares for itself.

A resize method or a learngene kind lists its options once, in its own file,
as `Option` records (name, type, default, choices, help). Everything else is
derived from those declarations: the CLI's flags and their help panels
(`lgcli.cli`), the defaults, and the checks of a value given from the command
line or from Python (`resolve_options`). Adding an option to a method touches
only that method's file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import UsageError

OPTION_TYPES = (str, int, float, bool)

# The condense run of `lg condense` and `lg bench` when none is given:
# started from the ancestry (--init auto), these reach the figures
# benchmarks/learngene_budget.py measured (docs/learngenes.md "How long to
# condense"), a twentieth of the example ancestry's own training.
DEFAULT_CONDENSE_STEPS = 600
DEFAULT_CONDENSE_BATCH_SIZE = 64

# The run of `lg distill` when none is given: the steps the healing
# aim names (300), at the fine-tuning rate measured for already-initialised
# models (lgcli.evaluate.DEFAULT_LR, benchmarks/probe_lr.py: 1e-3 undid a
# shrunk model's head start, 3e-4 kept it), tau 1, and alpha by the data:
# pure distillation for images, half the next-token loss for text (measured:
# lgcli/distill.py says why).
DEFAULT_DISTILL_STEPS = 300
DEFAULT_DISTILL_BATCH_SIZE = 64
DEFAULT_DISTILL_LR = 3e-4
DEFAULT_DISTILL_ALPHA_IMAGES = 1.0
DEFAULT_DISTILL_ALPHA_TEXT = 0.5
DEFAULT_DISTILL_TAU = 1.0


@dataclass(frozen=True)
class Option:
    """One option of a method or learngene kind.

    `name` is the Python keyword (``qkv_axis``); the CLI flag is derived from
    it (``--qkv-axis``). `choices` restricts a str option; `minimum` and
    `maximum` bound a number. A default of None means "not set" (the method decides).
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    # The help panel of a flag that is not only its owners' (--device, which
    # places a plain model's resize too); None: "Options of <owners>".
    panel: str | None = None

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise TypeError(f"option {self.name}: type must be one of {OPTION_TYPES}, not {self.type}")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any, owner: str) -> Any:
        """The value converted to the declared type, or a UsageError naming the flag."""
        if self.type is bool:
            if not isinstance(value, bool):
                raise UsageError(f"{self.flag} takes true or false, not {value!r} ({owner})")
            return value
        try:
            converted = self.type(value)
        except (TypeError, ValueError):
            kind = {int: "a whole number", float: "a number"}.get(self.type, self.type.__name__)
            raise UsageError(f"{self.flag} takes {kind}, not {value!r} ({owner})") from None
        if self.type is float and not math.isfinite(converted):
            raise UsageError(f"{self.flag} must be a finite number, not {value!r} ({owner})")
        if self.type is int and isinstance(value, float) and value != converted:
            raise UsageError(f"{self.flag} takes a whole number, not {value!r} ({owner})")
        if self.choices is not None and converted not in self.choices:
            raise UsageError(f"{self.flag} must be one of {', '.join(self.choices)}, not '{value}' ({owner})")
        if self.minimum is not None and converted < self.minimum:
            raise UsageError(f"{self.flag} must be at least {self.minimum:g}, not {value!r} ({owner})")
        if self.maximum is not None and converted > self.maximum:
            raise UsageError(f"{self.flag} must be at most {self.maximum:g}, not {value!r} ({owner})")
        return converted


def defaults(declared: Sequence[Option]) -> dict[str, Any]:
    return {option.name: option.default for option in declared}


def resolve_options(owner: str, declared: Sequence[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """The declared defaults, updated with the options given (None = not given).

    An option the owner does not declare is an error that names the ones it
    does take; a value of the wrong type, outside its choices or below its
    minimum is an error naming the flag.
    """
    by_name = {option.name: option for option in declared}
    resolved = defaults(declared)
    for name, value in given.items():
        if value is None:
            continue
        option = by_name.get(name)
        if option is None:
            takes = ", ".join(o.flag for o in declared) or "no options"
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not apply to {owner} (it takes {takes})")
        resolved[name] = option.check(value, owner)
    return resolved


def merge_declarations(owners: Mapping[str, Sequence[Option]]) -> dict[str, list[tuple[str, Option]]]:
    """One entry per option name across several owners: every (owner,
    declaration) that takes it, in order. Owners may share an option (WAVE and
    PEG both take ``--steps``) as long as they declare the same type; defaults
    and help may differ."""
    merged: dict[str, list[tuple[str, Option]]] = {}
    for owner, declared in owners.items():
        for option in declared:
            takers = merged.setdefault(option.name, [])
            if takers and takers[0][1].type is not option.type:
                raise TypeError(f"option {option.name}: {takers[0][0]} declares {takers[0][1].type.__name__}, "
                                f"{owner} {option.type.__name__}")
            takers.append((owner, option))
    return merged


__all__ = ["Option", "resolve_options", "defaults", "merge_declarations", "parse_byte_size", "parse_count",
           "parse_depth"]


_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9}
_BYTE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


# --shard-size when not given: Hugging Face's own max_shard_size.
DEFAULT_SHARD_SIZE = "5GB"


def parse_byte_size(text: str | int, flag: str, *, examples: str = "5GB, 500MB or 2GiB",
                    zero: str | None = "no limit") -> int:
    """``5GB`` (10^9, as Hugging Face's max_shard_size), ``2GiB`` (2^30),
    ``500MB`` or a plain count of bytes -> bytes. `zero`: what 0 means for
    `flag` (--shard-size: no limit), or None where 0 is no size (--memory, a
    budget): refused, as the refusal of a malformed size says, naming `examples`."""
    import re

    from .errors import UsageError

    # One refusal for every value not taken, so that what it offers is what the flag takes.
    refusal = f"{flag} takes a size such as {examples}{f' (or 0 for {zero})' if zero else ''}, not {text!r}"
    if isinstance(text, int) and not isinstance(text, bool) and text >= (0 if zero else 1):
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text), re.ASCII)
    unit = match[2].upper() if match else None
    if not match or unit not in _BYTE_UNITS:
        raise UsageError(refusal)
    size = int(float(match[1]) * _BYTE_UNITS[unit])
    if size == 0 and zero is None:  # 0, 0MB, or a fraction of a byte
        raise UsageError(refusal)
    return size


def parse_count(text: str | float | int | None, flag: str) -> int | None:
    """``60M`` (10^6), ``1.5B`` (10^9), ``500K``, ``6e7`` or a plain count ->
    a whole count of at least 1 (None stays None)."""
    import re

    from .errors import UsageError

    if text is None:
        return None
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*([KkMmBbGg]?)\s*", str(text), re.ASCII)
    count = int(float(match[1]) * _COUNT_UNITS[match[2].upper()]) if match else 0
    if count < 1:
        raise UsageError(f"{flag} takes a count such as 60M, 1.5B or 500K, not {str(text)!r}")
    return count


def parse_depth(text: str | int | None) -> int | tuple[int, ...] | None:
    """``--depth``: one number (``12``), or one per stage of a hierarchical
    model, comma-separated (``2,2,6,2``: a Swin); what one number means for
    such a model is `sizing.stage_depths`'s rule (its deepest stage)."""
    import re

    from .errors import UsageError

    if text is None or (isinstance(text, int) and not isinstance(text, bool)):
        return text
    if not re.fullmatch(r"\s*[0-9]+\s*(,\s*[0-9]+\s*)*", str(text), re.ASCII):
        raise UsageError(f"--depth takes a whole number, or one per stage separated by commas (2,2,6,2), "
                         f"not {str(text)!r}")
    values = tuple(int(part) for part in str(text).split(","))
    if any(v < 1 for v in values):
        raise UsageError(f"--depth must be at least 1 (per stage), not {str(text)!r}")
    return values[0] if len(values) == 1 else values
