"""The safetensors header, parsed strictly: lg accepts exactly what the
safetensors library accepts, or less.

A safetensors file is an 8-byte little-endian length N, N bytes of UTF-8 JSON,
then the tensors' bytes. The library (its Rust core, ``Metadata::validate``)
refuses, and so does lg:

- a header over 100 MB, or longer than the file;
- a header that is not UTF-8, not JSON, not an object, or nested too deeply;
- ``__metadata__`` that is not a map of strings to strings (null is allowed),
  or that appears twice;
- a shape or offset that is not a JSON integer in [0, 2**64) (``"576"``,
  ``576.0`` and ``true`` are refused, not coerced);
- byte ranges that do not tile the data exactly: sorted by offset, each
  tensor must start where the previous one ended, the first at 0, and the
  last must end where the file ends (no gap, no overlap, no aliasing, no
  trailing bytes);
- a shape whose element count times the dtype's size is not its byte range.

lg refuses a little more than the library: a tensor name that appears twice
(the library keeps the last), JSON's ``NaN``/``Infinity``, strings that are not
valid Unicode, nesting deeper than 64 levels, and dtypes it does not read
(``C64``, ``U16``, ...).

This module does not import torch: `lg` checks a file before paying for it, and
`lg inspect` reads a checkpoint's sizes from `HeaderTensor`s alone.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import shlex
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LgError, shown
from .lazy import torch

# safetensors refuses headers over 100 MB (MAX_HEADER_SIZE in its Rust core).
MAX_HEADER_BYTES = 100_000_000
# serde_json, which the library parses with, stops at 128 levels; a real
# header has 3 (header, entry, shape), lg's metadata values are parsed apart.
MAX_JSON_DEPTH = 64
U64 = 1 << 64
# The dtypes lg reads, with their sizes in bytes (the format's names).
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
# The same dtypes as torch names them (`torch.float32` ...): what `lg inspect`
# reports, read from the header without importing torch.
TORCH_DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                     "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                     "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
METADATA_KEY = "__metadata__"


@dataclass(frozen=True)
class TensorEntry:
    """One tensor's header entry; `begin`/`end` are offsets into the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class HeaderTensor:
    """A tensor as its header entry describes it, its values unread: what
    telling a checkpoint's family and sizes needs (`lg inspect`), without
    torch. It answers the questions lg asks a stored tensor there (shape,
    dtype, dim, numel, is_floating_point, element_size, is_meta) as a
    torch.Tensor would; `dtype` is torch's name for it (``float32``), so
    that messages and reports read as they do with the tensor itself."""

    format_dtype: str  # the header's name: F32, BF16, ...
    shape: tuple[int, ...]
    is_meta = False  # it stands for values in a file

    @property
    def dtype(self) -> str:
        return TORCH_DTYPE_NAMES[self.format_dtype]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return DTYPE_SIZES[self.format_dtype]

    def is_floating_point(self) -> bool:
        return self.format_dtype.startswith(("F", "BF"))


def value_dtype(tensor: Any) -> "torch.dtype":
    """The torch dtype of a tensor, or of the values a HeaderTensor stands
    for (importing torch: the caller is about to read them)."""
    return getattr(torch, tensor.dtype) if isinstance(tensor, HeaderTensor) else tensor.dtype


@dataclass
class Header:
    """A checked header: the metadata map and the tensors in file order."""

    metadata: dict[str, str]
    entries: list[TensorEntry]
    length: int  # bytes of JSON after the 8-byte length prefix

    @property
    def data_start(self) -> int:
        return 8 + self.length

    @property
    def data_bytes(self) -> int:
        """Bytes the tensors occupy (checked to tile 0..data_bytes exactly)."""
        return self.entries[-1].end if self.entries else 0


def header_length(prefix: bytes, name: str, total: int | None = None) -> int:
    """The JSON length from the first 8 bytes, checked against the 100 MB limit
    and, when known, the file's size."""
    size = len(prefix) if total is None else total
    if len(prefix) < 8:
        raise LgError(f"{shown(name)}: not a safetensors file ({size} bytes, too short for a header)")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES:
        # Most often another kind of file (text, a zip, an image), whose first
        # bytes read as an absurd length: say what it looks like, not the length.
        begins = _text_beginning(prefix[:8])
        looks = (f"it begins with the text {shown(repr(begins))}{_model_file_hint(name, total)}"
                 if begins is not None
                 else f"its first 8 bytes are no header length: they would claim {length / 1e6:,.0f} MB, and "
                      f"safetensors allows at most {MAX_HEADER_BYTES / 1e6:,.0f} MB")
        raise LgError(f"{shown(name)}: not a safetensors file ({looks})")
    if total is not None and 8 + length > total:
        raise LgError(f"{shown(name)}: truncated or not safetensors (header claims {length} bytes, "
                      f"the file has {total - 8} after the length)")
    return length


# Control characters a text file holds: tabs, line ends, form feeds.
_TEXT_CONTROLS = frozenset("\t\n\r\f")
# What a model folder holds beside its config.json: its weights (one file,
# shards with an index, or a pickle), as lg reads a folder.
_CONFIG_NAME = "config.json"
_WEIGHTS_NAMES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# A JSON file beside a model's weights is parsed (to say it is JSON) up to this size.
_MAX_JSON_CHECKED = 64 << 20


def _text_beginning(prefix: bytes) -> str | None:
    """The text `prefix` (a file's first bytes) is, when it is text: UTF-8
    (a character the end cuts in half left out, a byte order mark skipped)
    of printable characters, tabs and line ends. None when it is not."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(prefix)  # holds back a cut character
    except UnicodeDecodeError:
        return None
    text = text.removeprefix("\ufeff")
    if not text or not all(ch in _TEXT_CONTROLS or unicodedata.category(ch) not in ("Cc", "Cs", "Co", "Cn")
                           for ch in text):
        return None
    return text


def _model_file_hint(name: str, total: int | None) -> str:
    """When the text file `name` is a model folder's config.json (so named,
    or JSON beside a model's weights), what to give instead: the folder,
    as a command that runs as printed. Empty when it is not, or when
    `name` is not known to be the file read (a stream: `total` is None)."""
    if total is None:
        return ""
    try:
        if not os.path.isfile(name) or os.stat(name).st_size != total:
            return ""
        path = Path(name)
        folder = path.parent
        if path.name == _CONFIG_NAME:
            what = f"a model's {_CONFIG_NAME}, not its weights"
        elif any(os.path.isfile(folder / weights) for weights in _WEIGHTS_NAMES) and _is_json(path, total):
            what = "JSON beside a model's weights, not the weights"
        else:
            return ""
    except (OSError, ValueError):
        return ""
    shown_folder = str(folder) if not str(folder).startswith("-") else f"./{folder}"  # not taken for a flag
    return f": {what}; give the folder that holds it: lg inspect {shlex.quote(shown_folder)}"


def _is_json(path: Path, size: int) -> bool:
    if size > _MAX_JSON_CHECKED:
        return False
    try:
        json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return False
    return True


def parse_header(raw: bytes, name: str) -> Header:
    """Parse and check the JSON header `raw` (the N bytes after the length).

    Checks types, dtypes, sizes and that the byte ranges tile the data
    section; the caller checks that the data section has exactly
    `data_bytes` bytes (`check_data_size`)."""
    obj = load_json(raw, f"{shown(name)}: not a safetensors file (its header")
    if not isinstance(obj, dict):
        raise LgError(f"{shown(name)}: not a safetensors file (its header is not a JSON object)")
    metadata = obj.get(METADATA_KEY)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise LgError(f"{shown(name)}: corrupt safetensors header ({METADATA_KEY} must map strings to strings)")
    entries = [_entry(key, info, name) for key, info in obj.items() if key != METADATA_KEY]
    entries.sort(key=lambda e: (e.begin, e.end))
    position = 0
    for entry in entries:
        if entry.begin != position:
            what = "overlaps the previous tensor" if entry.begin < position else "leaves a gap before it"
            raise LgError(f"{shown(name)}: corrupt safetensors header (tensor {shown(entry.name)} at bytes "
                          f"{entry.begin}..{entry.end} {what}; tensors must tile the data exactly)")
        position = entry.end
    return Header(metadata=dict(metadata), entries=entries, length=len(raw))


def check_data_size(header: Header, data_bytes: int, name: str) -> None:
    """The data section must end exactly where the last tensor does."""
    need = header.data_bytes
    if data_bytes < need:
        raise LgError(f"{shown(name)}: truncated (the header's tensors need {need} bytes of data, "
                      f"the file has {data_bytes})")
    if data_bytes > need:
        raise LgError(f"{shown(name)}: corrupt safetensors file ({data_bytes - need} bytes after the last "
                      f"tensor: the header does not cover the file)")


def _entry(key: str, info: Any, name: str) -> TensorEntry:
    def corrupt(what: str) -> LgError:
        return LgError(f"{shown(name)}: corrupt safetensors header (tensor {shown(key)}: {what})")

    if not isinstance(info, dict):
        raise corrupt("the entry is not a JSON object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str):
        raise corrupt("dtype must be a string")
    if not isinstance(shape, list) or not all(_is_u64(n) for n in shape):
        raise corrupt("shape must be a list of non-negative JSON integers")
    if any(n >= 2**63 for n in shape):  # the format allows it; torch's sizes are signed 64-bit
        raise corrupt(f"shape {shape} has a dimension of 2**63 or more, which torch cannot hold")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(n) for n in offsets):
        raise corrupt("data_offsets must be two non-negative JSON integers")
    if dtype not in DTYPE_SIZES:
        raise LgError(f"{shown(name)}: tensor {shown(key)} has dtype {shown(dtype)}, which lg does not read "
                      f"(known: {', '.join(DTYPE_SIZES)})")
    begin, end = offsets
    if begin > end:
        raise corrupt(f"data_offsets [{begin}, {end}] run backwards")
    numel = 1
    for n in shape:
        numel *= n
    if numel * DTYPE_SIZES[dtype] != end - begin:
        raise corrupt(f"shape {shape} of {dtype} needs {numel * DTYPE_SIZES[dtype]} bytes, "
                      f"data_offsets give {end - begin}")
    return TensorEntry(name=key, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def _is_u64(value: Any) -> bool:
    # bool is an int in Python, not in JSON; floats and strings are not coerced.
    return type(value) is int and 0 <= value < U64


class _Refused(ValueError):
    pass


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"has the key {shown(key)} twice")
        out[key] = value
    return out


def _no_constants(token: str) -> Any:
    raise _Refused(f"holds {token}, which JSON does not allow")


def load_json(raw: bytes | str, context: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, valid Unicode,
    nesting at most `max_depth`. Errors read ``{context} is not JSON)`` etc.,
    so `context` ends in an open parenthesis's phrase, e.g. "x: bad (its header"."""
    try:
        text = bytes(raw).decode("utf-8") if not isinstance(raw, str) else raw
    except UnicodeError:
        raise LgError(f"{context} is not UTF-8 text)") from None
    try:
        obj = json.loads(text, object_pairs_hook=_pairs_without_duplicates, parse_constant=_no_constants)
    except _Refused as exc:
        raise LgError(f"{context} {exc})") from None
    except RecursionError:
        raise LgError(f"{context} is nested too deeply)") from None
    except json.JSONDecodeError:
        raise LgError(f"{context} is not valid JSON)") from None
    problem = _json_problem(obj, max_depth)
    if problem:
        raise LgError(f"{context} {problem})")
    return obj


def _json_problem(obj: Any, max_depth: int) -> str | None:
    """Depth over the limit, or a string that is not valid Unicode (JSON's
    \\ud800 escapes decode to lone surrogates, which UTF-8 cannot hold)."""
    pending = [(obj, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                return f"is nested more than {max_depth} levels deep"
            items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
            for key, item in items:
                if key is not None and not valid_unicode(key):
                    return "holds a string that is not valid Unicode"
                pending.append((item, depth + 1))
        elif isinstance(value, str) and not valid_unicode(value):
            return "holds a string that is not valid Unicode"
    return None


def valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


__all__ = ["Header", "HeaderTensor", "TensorEntry", "value_dtype", "MAX_HEADER_BYTES", "DTYPE_SIZES",
           "TORCH_DTYPE_NAMES", "header_length", "parse_header", "check_data_size", "load_json", "valid_unicode"]
