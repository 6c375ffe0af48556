"""Memory: what the kernel says is available, refusing what does not fit,
and handing freed memory back to the system."""

from __future__ import annotations

import functools

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
