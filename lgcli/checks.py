"""How a value a user gave appears in an error message, and the checks of
settings (whole numbers, reals, seeds, --test-fraction) every command makes
before it starts: one line naming the flag, never a traceback."""

from __future__ import annotations

import math
import numbers
import operator
import os
from typing import Any, Callable

from lgcli.errors import UsageError, one_line, shown


SEED_MAX = 2**32 - 1


# ---- how user input appears in error messages, and settings checks ----

def shown_path(path: str | os.PathLike) -> str:
    """A path for an error message (`lgcli.errors.shown`): as it is, unless it
    holds a character that could break the message's one line (a newline, a
    control character, an undecodable byte), then quoted and escaped."""
    text = os.fspath(path)
    return shown(text if isinstance(text, str) else os.fsdecode(text))


def short_line(text: str, limit: int = 200) -> str:
    """An exception's message as a short single line of printable text."""
    text = one_line(" ".join(str(text).split()))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shown_value(value: Any) -> str:
    """A setting's value for an error message (bounded: a huge integer is not spelled out)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    if isinstance(value, float):
        return repr(value)
    return short_line(repr(value), 60)


def check_real(value: Any, name: str, expected: str, accept: Callable[[float], bool]) -> float:
    """`value` as a finite float for which `accept` holds, or an `LgError`
    "<name> must be <expected>, got <value>" (`name` is the flag, e.g. ``--lr``)."""
    number = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except (OverflowError, ValueError, TypeError):
            number = None
    if number is None or not math.isfinite(number) or not accept(number):
        raise UsageError(f"{name} must be {expected}, got {shown_value(value)}")
    return number


def check_whole(value: Any, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    """`value` as an int in [minimum, maximum], or an `LgError` naming `name`."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        expected = (f"a whole number in [{minimum}, {maximum}]" if maximum is not None
                    else f"a whole number >= {minimum}")
        raise UsageError(f"{name} must be {expected}, got {shown_value(value)}")
    return number


def check_seed(seed: Any, name: str = "--seed") -> int:
    """A seed lg accepts: a whole number in [0, 2**32 - 1]. Seeds reach
    `torch.Generator.manual_seed`, `torch.manual_seed` and DistributedSampler,
    also as ``seed * 1_000_003 + step`` (see `lgcli.train`), all of which stay
    within their 64-bit range for every seed in this range."""
    return check_whole(seed, name, 0, SEED_MAX)


# --test-fraction 1: all of the data is the test split, nothing is trained on (lg eval --steps 0 scoring a
# held-out file whole). Every trainer refuses the empty train split it leaves.
WHOLE_TEST_FRACTION = 1.0


def check_test_fraction(test_fraction: Any) -> float:
    """`--test-fraction`: a finite number in [0, 0.9], or 1 (`WHOLE_TEST_FRACTION`)."""
    return check_real(test_fraction, "--test-fraction", "a number in [0, 0.9], or 1 to hold out all of it",
                      lambda v: 0.0 <= v <= 0.9 or v == WHOLE_TEST_FRACTION)


def apt_get_install(package: str) -> str:
    """The command that installs a Debian package, as the user running lg
    can run it as printed: root has it directly (and a container often has
    no sudo), anyone else through sudo."""
    return f"{'' if os.geteuid() == 0 else 'sudo '}apt-get install {package}"
