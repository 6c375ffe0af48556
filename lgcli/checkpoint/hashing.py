"""SHA-256 of what lg reads and writes, computed in one background thread
(hashlib releases the GIL), so that hashing overlaps the work."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

HASH_CHUNK = 1 << 22  # 4 MiB: fast to hash, small beside a role stack

_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lg-sha256")


def _hash_in_background(handle: BinaryIO) -> Future:
    """The file's sha256, computed in a background thread by pread (not
    through the memory map, whose touched pages would count as this
    process's memory)."""
    def digest() -> str:
        h = hashlib.sha256()
        buffer = bytearray(HASH_CHUNK)
        view, position = memoryview(buffer), 0
        while True:
            got = os.preadv(handle.fileno(), [view], position)
            if got <= 0:
                break
            h.update(view[:got])
            position += got
        return h.hexdigest()

    return _HASHER.submit(digest)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()
