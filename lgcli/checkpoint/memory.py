"""Memory: what the kernel says is available, refusing what does not fit,
and handing freed memory back to the system."""

from __future__ import annotations

import errno
import functools
import re

from ..errors import LgError


def available_memory() -> int | None:
    """Bytes of memory the kernel says are available (MemAvailable), or None."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(nbytes: int, what: str) -> None:
    """Refuse to allocate more than the memory available, with the figures."""
    free = available_memory()
    if free is not None and nbytes > free:
        raise LgError(f"{what} need {memory_text(nbytes)} of memory and {memory_text(free)} is available")


def memory_text(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"


def release_freed_memory() -> None:
    """Hand memory freed by the allocator back to the system (glibc's
    malloc_trim). Role stacks of a few MB to a few tens of MB fall under
    glibc's dynamic mmap threshold and are freed into the heap, where they
    would still count as this process's memory: the writer calls this after
    each group, so a resize's peak is one group's, not the heap's high water."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


# What torch's allocators say when an allocation fails: the CPU's
# ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N
# bytes"; "not enough memory" on Windows), CUDA's and MPS's ("CUDA out of
# memory. Tried to allocate 1.50 GiB", raised as torch.OutOfMemoryError).
_OOM_WORDS = ("can't allocate memory", "not enough memory", "out of memory")
_CPU_REQUEST = re.compile(r"tried to allocate ([0-9]+) bytes", re.IGNORECASE)
_SIZED_REQUEST = re.compile(r"tried to allocate ([0-9][0-9.]* ?[KMGTP]?i?B)\b", re.IGNORECASE)


def out_of_memory(exc: BaseException) -> str | None:
    """When `exc` (or the exception it was raised from) says that memory ran
    out, what was asked ("tried to allocate 1.5 GiB", "" when it does not
    say); None for anything else. Found by type name and message, so that
    nothing imports torch to ask: MemoryError, torch's OutOfMemoryError
    (CUDA's), a RuntimeError of a torch allocator, an OSError of ENOMEM."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        names = {cls.__name__ for cls in type(exc).__mro__}
        message = str(exc)
        if (isinstance(exc, MemoryError) or "OutOfMemoryError" in names
                or (isinstance(exc, RuntimeError) and any(w in message.lower() for w in _OOM_WORDS))
                or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)):
            return _request(message, "GPU" if "cuda" in message.lower() else None)
        exc = exc.__cause__
    return None


def _request(message: str, device: str | None) -> str:
    where = f" on the {device}" if device else ""
    if match := _CPU_REQUEST.search(message):
        return f"tried to allocate {memory_text(int(match[1]))}{where}"
    if match := _SIZED_REQUEST.search(message):
        return f"tried to allocate {match[1]}{where}"
    return ""
