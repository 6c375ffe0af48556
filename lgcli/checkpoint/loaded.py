"""The `Checkpoint`: tensors and metadata read from one source, and the
safetensors dtype names that its tensors are read and written as."""

from __future__ import annotations

import functools
import mmap
import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ..errors import LgError, counted, notify_stderr, shown
from ..header import TORCH_DTYPE_NAMES, HeaderTensor, value_dtype
from ..lazy import torch
from ..stack import copy_elements
from .companions import CompanionFile
from .metadata import decode_lg_metadata
from .names import STDIO, _source_label

@functools.cache
def torch_dtypes() -> dict[str, torch.dtype]:
    """safetensors dtype names -> torch dtypes (the safetensors format's own
    table), made on first use: only code that makes tensors needs torch's."""
    return {name: getattr(torch, torch_name) for name, torch_name in TORCH_DTYPE_NAMES.items()}


@functools.cache
def dtype_names() -> dict[torch.dtype, str]:
    """torch dtypes -> safetensors dtype names."""
    return {dtype: name for name, dtype in torch_dtypes().items()}


def _comparable(values: torch.Tensor) -> torch.Tensor:
    """`values` in a dtype torch compares and reduces: float8 (F8_E4M3,
    F8_E5M2) has neither, so it is widened to float16, which holds each of
    its values, NaN and Inf included."""
    return values if values.element_size() > 1 else values.to(torch.float16)


def all_finite(values: torch.Tensor) -> bool:
    """Whether every element of a floating-point tensor is finite, judged
    by its extremes: torch.aminmax propagates NaN (as documented), and an
    Inf is an extreme. On the CPU this is about 20 times faster than
    ``isfinite(values).all()``, which took 5 of the 13 s of shrinking a
    540 MB SmolLM2 on the 2-core development machine."""
    low, high = torch.aminmax(_comparable(values).reshape(-1))
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


@dataclass
class Checkpoint:
    """Tensors and metadata read from one source."""

    tensors: dict[str, torch.Tensor | HeaderTensor]
    metadata: dict[str, str] = field(default_factory=dict)
    # The hex digest, or a Future computing it: a large file is hashed in a
    # background thread while its tensors are used (hashlib releases the GIL).
    digest: str | Future = ""
    source: str = STDIO
    nbytes: int = 0
    # The private memory map that file-backed tensors view (None otherwise).
    mapping: mmap.mmap | None = field(default=None, repr=False)
    # File-backed tensors: name -> (open file, absolute byte offset), read by
    # `read_into` with pread: straight from the page cache into the caller's
    # buffer, so what a lazy stack reads is never mapped into this process.
    locations: dict[str, tuple[BinaryIO, int]] = field(default_factory=dict, repr=False)
    # A Hugging Face model folder's config.json (None for anything else), and
    # the files beside the weights that an output folder copies (tokenizer,
    # generation config, sentence-transformers modules): name -> the path
    # in a folder, or the bytes a single file carries in its metadata.
    config: dict[str, Any] | None = None
    companions: dict[str, "CompanionFile | bytes"] = field(default_factory=dict, repr=False)
    # Non-finite weights (NaN, Inf) are refused as they are read, naming the
    # tensor: a resize spreads them silently (BoT turns one Inf into three).
    # With allow_nonfinite they are kept, and said once per tensor.
    allow_nonfinite: bool = False
    _said_nonfinite: set = field(default_factory=set, repr=False)
    # Read with header_only (`lg inspect`): `tensors` are HeaderTensors.
    header_only: bool = False
    _lg: dict[str, Any] | None = field(default=None, repr=False)

    def read_into(self, key: str, out: torch.Tensor, start: int = 0) -> None:
        """Fill `out` (contiguous, on the CPU, of the tensor's dtype) with
        elements ``start .. start + out.numel()`` of tensor `key`, flattened:
        one layer's slice of a role (q's rows of a fused qkv, say)."""
        source = self.tensors[key]
        count = out.numel()
        if out.dtype != value_dtype(source) or not out.is_contiguous() or start + count > source.numel():
            raise ValueError(f"read_into({key!r}): {count} {out.dtype} elements from {start} of a "
                             f"{source.dtype} tensor of {source.numel()}")
        location = self.locations.get(key)
        if location is None:
            copy_elements(source, out, start)
        elif count:
            handle, offset = location
            view = memoryview(out.view(-1).view(torch.uint8).numpy())
            position = offset + start * source.element_size()
            while len(view):
                got = os.preadv(handle.fileno(), [view], position)
                if got <= 0:
                    raise LgError(f"{shown(self.source)}: the file ended early while being read "
                                  f"(was it changed or truncated?)")
                view, position = view[got:], position + got
        if out.is_floating_point() and count and not all_finite(out):
            self._nonfinite(key, int((~torch.isfinite(_comparable(out))).sum()))

    def _nonfinite(self, key: str, count: int) -> None:
        where = f"{self.label}: tensor {shown(key)} holds {counted(count, 'non-finite value')} (NaN or Inf)"
        if not self.allow_nonfinite:
            raise LgError(f"{where}; a resize would spread them into the output: refused (--allow-nonfinite "
                          f"keeps them)")
        if key not in self._said_nonfinite:
            self._said_nonfinite.add(key)
            notify_stderr(f"{where}; kept (--allow-nonfinite)")

    @property
    def digest_ready(self) -> bool:
        return not isinstance(self.digest, Future) or self.digest.done()

    @property
    def sha256(self) -> str:
        if isinstance(self.digest, Future):
            self.digest = self.digest.result()
        return self.digest

    @property
    def label(self) -> str:
        """How messages name it: its path, or <stdin>."""
        return shown(_source_label(self.source))

    @property
    def lg(self) -> dict[str, Any]:
        """lg's own metadata, decoded and checked ({} for foreign files)."""
        if self._lg is None:
            self._lg = decode_lg_metadata(self.metadata, name=self.source)
        return self._lg
