"""Reading and writing checkpoints: safetensors files, stdin/stdout ('-'),
sharded folders, and legacy PyTorch pickles (tensors only).

Every file lg writes carries its own description in the safetensors
``__metadata__`` (a string -> string map): ``format: pt`` (what timm and
transformers expect) plus lg's keys, all prefixed ``lg.``:

- ``lg.kind``     ``model`` or ``learngene``
- ``lg.family``   architecture family (``vit``)
- ``lg.config``   JSON: the family's constructor arguments (timm ``model_args``)
- ``lg.method``   the method that produced the file, ``lg.options`` its options (JSON)
- ``lg.source_sha256`` and ``lg.source`` (JSON of the source's own lg metadata,
  which nests its source in turn: provenance chains through pipes)
- ``lg.learngene`` (learngenes only, JSON): the kind's own sizes, and what
  condensing recorded (steps, seconds, the auxiliary model's test accuracy)
- ``lg.version``

and, in a single file made from a text model (a pipe, a learngene), the
source's tokenizer and other companion files, ``companion:NAME`` (UTF-8
text) or ``companion-base64:NAME``, outside ``lg.*`` so that no provenance
step nests them.

Writes are atomic (a temporary file in the destination folder, then a
rename), an existing output is refused without ``force``, and an input is
never opened for writing.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import hashlib
import io
import json
import math
import mmap
import os
import pickle
import re
import shutil
import stat
import struct
import sys
import tempfile
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping

import torch

from . import __version__
from .errors import LgError, notify_stderr, one_line, os_reason, shown
from .header import (MAX_HEADER_BYTES, Header, check_data_size, header_length, load_json,
                     parse_header, valid_unicode)
from .hub import hub_name_of_path, open_snapshot_link, resolve_source, snapshot_blobs
from .stack import copy_elements

STDIO = "-"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# Streams are read in chunks of this size (a pipe gives what it has).
STREAM_CHUNK = 1 << 24
# A training checkpoint's wrappers ({'model': {'state_dict': ...}}) are
# followed this deep at most.
MAX_WRAPPERS = 8
PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
# Containers that training scripts wrap a state dict in (timm, DeiT, MAE, ...),
# in the order we prefer them.
WRAPPER_KEYS = ("model", "state_dict", "model_ema")
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
LG_PREFIX = "lg."
JSON_KEYS = ("config", "options", "source", "learngene")
# safetensors dtype names <-> torch dtypes (the safetensors format's own table).
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
HASH_CHUNK = 1 << 22  # 4 MiB: fast to hash, small beside a role stack


@dataclass
class Checkpoint:
    """Tensors and metadata read from one source."""

    tensors: dict[str, torch.Tensor]
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
    _lg: dict[str, Any] | None = field(default=None, repr=False)

    def read_into(self, key: str, out: torch.Tensor, start: int = 0) -> None:
        """Fill `out` (contiguous, on the CPU, of the tensor's dtype) with
        elements ``start .. start + out.numel()`` of tensor `key`, flattened:
        one layer's slice of a role (q's rows of a fused qkv, say)."""
        source = self.tensors[key]
        count = out.numel()
        if out.dtype != source.dtype or not out.is_contiguous() or start + count > source.numel():
            raise ValueError(f"read_into({key!r}): {count} {out.dtype} elements from {start} of a "
                             f"{source.dtype} tensor of {source.numel()}")
        location = self.locations.get(key)
        if location is None or count == 0:
            copy_elements(source, out, start)
        else:
            handle, offset = location
            view = memoryview(out.view(-1).view(torch.uint8).numpy())
            position = offset + start * source.element_size()
            while len(view):
                got = os.preadv(handle.fileno(), [view], position)
                if got <= 0:
                    raise LgError(f"{shown(self.source)}: the file ended early while being read "
                                  f"(was it changed or truncated?)")
                view, position = view[got:], position + got
        if out.is_floating_point() and count and not bool(torch.isfinite(out).all()):
            self._nonfinite(key, int((~torch.isfinite(out)).sum()))

    def _nonfinite(self, key: str, count: int) -> None:
        where = f"{self.label}: tensor {shown(key)} holds {count} non-finite value{'s' if count > 1 else ''} (NaN or Inf)"
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


# lg's metadata fields and what each must be (after JSON decoding).
LG_FIELD_TYPES: dict[str, type] = {"kind": str, "family": str, "method": str, "source_sha256": str,
                                   "version": str, "config": dict, "options": dict, "source": dict,
                                   "learngene": dict}
LG_KINDS = ("model", "learngene")
# Provenance steps kept in a file: a longer chain keeps its newest steps and
# marks the cut (`truncated`), so every file lg writes reads back.
MAX_PROVENANCE = 32
# JSON levels a metadata value may nest: a provenance step holds options
# and configs a few levels deep.
MAX_METADATA_DEPTH = 8 * MAX_PROVENANCE


def decode_lg_metadata(metadata: Mapping[str, str], name: str = STDIO) -> dict[str, Any]:
    """lg's ``lg.*`` keys, JSON values decoded, every field's type checked.

    Unknown ``lg.*`` keys are kept as strings (a newer lg may add some); a
    field of the wrong type, a kind lg does not know, or a provenance chain
    deeper than MAX_PROVENANCE is refused naming the key."""
    label = _display_name(name) if name == STDIO else name
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not key.startswith(LG_PREFIX):
            continue
        field_name = key[len(LG_PREFIX):]
        if field_name in JSON_KEYS:
            value = load_json(value, f"{shown(label)}: refused: metadata {shown(key)} (its value",
                              max_depth=MAX_METADATA_DEPTH)
        expected = LG_FIELD_TYPES.get(field_name)
        if expected is not None and not isinstance(value, expected):
            raise LgError(f"{shown(label)}: refused: metadata {shown(key)} must be "
                          f"{'a JSON object' if expected is dict else 'a string'}, "
                          f"found {_json_type(value)}")
        out[field_name] = value
    if "kind" in out and out["kind"] not in LG_KINDS:
        raise LgError(f"{shown(label)}: refused: metadata lg.kind is {shown(out['kind'])}, "
                      f"expected {' or '.join(LG_KINDS)}")
    sha = out.get("source_sha256")
    if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise LgError(f"{shown(label)}: refused: metadata lg.source_sha256 is not a SHA-256 hex digest")
    if len(provenance_chain(out)) > MAX_PROVENANCE + 1:
        raise LgError(f"{shown(label)}: refused: metadata lg.source chains more than {MAX_PROVENANCE} "
                      f"steps (lg writes at most {MAX_PROVENANCE})")
    _check_provenance(out.get("source"), label)
    return out


# The fields of a provenance step (lg.source, and each step's own source),
# and what each must be: a file name that is an object was carried into
# every output and shown as such.
PROVENANCE_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "file": str, "kind": str, "method": str, "options": dict, "source_sha256": str, "version": str,
    "truncated": bool, "source": dict, "family": str, "config": dict, "learngene": dict}


def _check_provenance(step: Any, label: str) -> None:
    depth = 1
    while step is not None:
        if not isinstance(step, Mapping):
            raise LgError(f"{shown(label)}: refused: metadata lg.source (step {depth}) must be a JSON object, "
                          f"found {_json_type(step)}")
        for field_name, expected in PROVENANCE_FIELD_TYPES.items():
            value = step.get(field_name)
            if value is not None and not isinstance(value, expected):
                raise LgError(f"{shown(label)}: refused: metadata lg.source (step {depth}) field "
                              f"{shown(field_name)} must be {'a JSON object' if expected is dict else 'a string' if expected is str else 'true or false'}, "
                              f"found {_json_type(value)}")
        step, depth = step.get("source"), depth + 1


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def encode_lg_metadata(lg: Mapping[str, Any]) -> dict[str, str]:
    out = {"format": "pt"}
    for name, value in lg.items():
        if value is None:
            continue
        out[LG_PREFIX + name] = (json.dumps(value, sort_keys=True) if name in JSON_KEYS
                                 else str(value))
    return out


def provenance_metadata(*, kind: str, family: str, config: Mapping[str, Any],
                        method: str | None = None, options: Mapping[str, Any] | None = None,
                        source: Checkpoint | None = None,
                        learngene: Mapping[str, Any] | None = None,
                        source_sha256: str | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a file lg writes, chained to its source.
    `source_sha256` stands in for the source's hash (a placeholder of the
    same length, while the hash is still being computed)."""
    lg: dict[str, Any] = {"kind": kind, "family": family, "config": dict(config),
                          "method": method, "options": dict(options) if options else None,
                          "learngene": dict(learngene) if learngene else None, "version": __version__}
    if source is not None:
        lg["source_sha256"] = source.sha256 if source_sha256 is None else source_sha256
        parent = _trimmed(source.lg, MAX_PROVENANCE - 1)
        # A foreign source (no lg metadata) is still recorded by hash and name.
        lg["source"] = parent if parent else {"file": _display_name(source.source)}
        if parent:
            lg["source"].setdefault("file", _display_name(source.source))
    return encode_lg_metadata(lg)


def _trimmed(lg: Mapping[str, Any], keep: int) -> dict[str, Any]:
    """A copy of a provenance chain with at most `keep` steps; a cut chain's
    last kept step says ``truncated: true``."""
    top = dict(lg)
    node = top
    for _ in range(keep - 1):
        parent = node.get("source")
        if not isinstance(parent, Mapping):
            return top
        node["source"] = dict(parent)
        node = node["source"]
    if isinstance(node.get("source"), Mapping):
        del node["source"]
        node["truncated"] = True
    return top


def provenance_chain(lg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Steps from this file back to its first recorded ancestor."""
    steps = []
    node: Mapping[str, Any] | None = lg
    while node:
        steps.append({k: node.get(k) for k in ("file", "kind", "method", "options",
                                                "source_sha256", "version", "truncated")
                      if node.get(k) is not None})
        node = node.get("source") if isinstance(node.get("source"), Mapping) else None
    return steps


def _source_label(source: str) -> str:
    return "<stdin>" if source == STDIO else str(source)


def _display_name(source: str) -> str:
    """The source's file name as provenance records it: always valid Unicode,
    so the file reads back (a byte that is not UTF-8 in a name, which Python
    keeps as a lone surrogate, is written as \\xNN)."""
    if source == STDIO:
        return "<stdin>"
    # A cached snapshot's folder is named by its commit: the hub id says more.
    name = hub_name_of_path(source) or os.path.basename(str(source).rstrip("/"))
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# ---------------------------------------------------------------- reading

def read_checkpoint(source: str | os.PathLike, *, stdin: BinaryIO | None = None) -> Checkpoint:
    """Read a checkpoint from a path, a sharded folder, a pipe, or '-' (stdin).

    A regular file's header is read and its tensors are read when asked for
    (`Checkpoint.read_into`, or views of a private map); stdin, a named pipe and a process
    substitution (``<(...)``) are read as a stream, up to the size their
    header states (see `read_stream`). A hub id (`org/name[@revision]`) is
    read from the local Hugging Face cache (`lgcli.hub.resolve_source`)."""
    src = resolve_source(str(source))
    if src == STDIO:
        stream = stdin if stdin is not None else _stdin_buffer()
        return read_stream(stream, STDIO)
    mode = _stat(src).st_mode
    try:
        if stat.S_ISDIR(mode):
            return _read_folder(Path(src))
        if not stat.S_ISREG(mode):  # a FIFO, a pipe from <(...), a character device
            with open(src, "rb", buffering=0) as stream:
                return read_stream(stream, src)
        path = Path(src)
        if path.suffix in PICKLE_SUFFIXES and not _looks_like_safetensors(path):
            return _read_pickle(path)
        return _read_safetensors_file(path)
    except OSError as exc:
        raise LgError(f"{shown(src)}: cannot read it ({os_reason(exc)})") from None


def _stdin_buffer() -> BinaryIO:
    stream = getattr(sys.stdin, "buffer", sys.stdin) if sys.stdin is not None else None
    if stream is None or getattr(stream, "closed", False):
        raise LgError("<stdin>: standard input is closed (pipe a checkpoint in, or give a file)")
    return stream


def _stat(src: str) -> os.stat_result:
    """os.stat, with the reasons a path cannot be read as one sentence."""
    try:
        return os.stat(src)
    except FileNotFoundError:
        raise LgError(f"{shown(src)}: no such file or folder") from None
    except OSError as exc:
        raise LgError(f"{shown(src)}: cannot read it ({os_reason(exc)})") from None


def _looks_like_safetensors(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def _read_exactly(stream: BinaryIO, count: int, into: bytearray | memoryview | None = None) -> bytes | int:
    """Read `count` bytes from a stream whose reads may return fewer (pipes).
    Returns the bytes, or with `into`, how many bytes were read into it."""
    if into is None:
        chunks, got = [], 0
        while got < count:
            chunk = stream.read(count - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    if not hasattr(stream, "readinto"):
        data = _read_exactly(stream, count)
        into[:len(data)] = data
        return len(data)
    view, got = memoryview(into), 0
    while got < count:
        n = stream.readinto(view[got:got + min(count - got, STREAM_CHUNK)])
        if not n:
            break
        got += n
    view.release()
    return got


def read_stream(stream: BinaryIO, name: str) -> Checkpoint:
    """Read a safetensors checkpoint from a stream (stdin, a pipe).

    Bounded: the 8-byte length (at most 100 MB of header), then exactly the
    data the checked header describes, which must fit in the memory
    available; one more byte must not exist (trailing data is refused). An
    endless stream (``/dev/zero``) is therefore refused after its header."""
    label = "<stdin>" if name == STDIO else name
    prefix = _read_exactly(stream, 8)
    if not prefix:
        raise LgError(f"{shown(label)}: empty input (expected a safetensors checkpoint)")
    pickled = LgError(f"{shown(label)}: this looks like a PyTorch pickle; lg reads pickles from a regular "
                      f".pth/.pt/.bin file only (save it to a file first)")
    if prefix[:4] == b"PK\x03\x04":  # torch.save's zip
        raise pickled
    # A legacy pickle starts 0x80 and its protocol (2-5); so does a safetensors
    # header of 0x280.. bytes (its length is little-endian): only a header
    # that does not parse is taken for a pickle.
    maybe_pickle = prefix[0] == 0x80 and 2 <= prefix[1] <= 5
    try:
        length = header_length(prefix, label)
        raw = _read_exactly(stream, length)
        if len(raw) < length:
            raise LgError(f"{shown(label)}: truncated (header claims {length} bytes, the input ended after "
                          f"{len(raw)})")
        header = parse_header(raw, label)
    except LgError:
        if maybe_pickle:
            raise pickled from None
        raise
    need = header.data_bytes
    check_memory(need, f"{shown(label)}: its tensors")
    # Anonymous memory is zero pages the kernel gives as they are written: a
    # stream that claims 4 GB and ends after 144 bytes costs what it sent,
    # not 4 GB (a bytearray is zeroed, every page touched, before the read).
    data = mmap.mmap(-1, need) if need else bytearray()
    got = _read_exactly(stream, need, into=data)
    if got < need:
        check_data_size(header, got, label)
    if _read_exactly(stream, 1):
        raise LgError(f"{shown(label)}: corrupt safetensors input (data continues after the last tensor: "
                      f"the header does not cover it)")
    digest = hashlib.sha256(prefix)
    digest.update(raw)
    digest.update(data)
    return _checkpoint_from_buffer(header, data, 0, name, digest.hexdigest(), 8 + length + need)


def read_bytes(data: bytes) -> Checkpoint:
    """Parse safetensors bytes held in memory (tests, notebooks)."""
    return read_stream(io.BytesIO(data), STDIO)


def _read_safetensors_file(path: Path) -> Checkpoint:
    """A file's tensors, two ways: `read_into` reads a tensor's bytes with
    pread into the caller's buffer (how lazy stacks read: one copy, nothing
    mapped into this process), and `tensors` are zero-copy views of a private
    memory map, for code that wants whole tensors (inspect, learngenes,
    training checkpoints).

    ACCESS_COPY makes the mapping copy-on-write: tensors are writable, and a
    write never reaches the file (inputs are never modified).
    """
    f = open(path, "rb")  # kept open (closed with the Checkpoint) for read_into
    try:
        total = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        length = header_length(prefix, str(path), total)
        header = parse_header(f.read(length), str(path))
        check_data_size(header, total - header.data_start, str(path))
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if total else None
    except BaseException:
        f.close()
        raise
    checkpoint = _checkpoint_from_buffer(header, mapped, header.data_start, str(path),
                                         _hash_in_background(f), total)
    checkpoint.mapping = mapped
    checkpoint.locations = {entry.name: (f, header.data_start + entry.begin) for entry in header.entries}
    return checkpoint


def _checkpoint_from_buffer(header: Header, buffer, data_start: int, name: str, digest, nbytes: int) -> Checkpoint:
    tensors = {entry.name: _tensor_from_buffer(buffer, DTYPES[entry.dtype], list(entry.shape),
                                               data_start + entry.begin, entry.nbytes)
               for entry in header.entries}
    return Checkpoint(tensors=tensors, metadata=header.metadata, digest=digest, source=name, nbytes=nbytes,
                      companions=companions_from_metadata(header.metadata, name))


def _tensor_from_buffer(buffer, dtype: torch.dtype, shape: list[int], offset: int,
                        nbytes: int) -> torch.Tensor:
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    if offset % dtype.itemsize:
        # Misaligned data (legal in the format, never written by safetensors
        # or lg): copy it into an aligned tensor rather than view it.
        raw = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=offset).clone()
        return raw.view(dtype).reshape(shape)
    return torch.frombuffer(buffer, dtype=dtype, count=nbytes // dtype.itemsize,
                            offset=offset).reshape(shape)


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
        raise LgError(f"{what} need {_gib(nbytes)} of memory and {_gib(free)} is available")


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"


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


def _regular_file(path: Path, what: str) -> None:
    """Shards and index files must be regular files: opening a FIFO would block."""
    mode = _stat(str(path)).st_mode
    if not stat.S_ISREG(mode):
        raise LgError(f"{shown(path)}: {what} must be a regular file")


# A Hugging Face model folder: its config, its weights (one file, or shards
# with an index), and what is copied beside new weights unchanged.
CONFIG_NAME, WEIGHTS_NAME, PICKLED_WEIGHTS_NAME = "config.json", "model.safetensors", "pytorch_model.bin"
COMPANION_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "tokenizer.model", "spiece.model",
                   "generation_config.json", "chat_template.jinja", "chat_template.json",
                   # sentence-transformers: the pipeline, and its pooling / normalising modules
                   "modules.json", "config_sentence_transformers.json", "sentence_bert_config.json")
COMPANION_FOLDER = re.compile(r"^[0-9]+_(Pooling|Normalize)$", re.ASCII)
MAX_COMPANION_BYTES = 1 << 28  # 256 MiB: the largest tokenizer files are tens of MB
# All of a folder's companions together, and how many: a real model has a
# handful of files of a few MB (a sentence-transformers folder, a dozen).
MAX_COMPANION_TOTAL_BYTES = 1 << 29
MAX_COMPANION_FILES = 256
# A single file (a pipe, a learngene) carries its model's companions in its
# header, one metadata entry each (UTF-8 text as it is, anything else in
# base64), outside the lg.* keys so that no provenance step nests them. At
# most this many bytes in all: safetensors caps a header at 100 MB.
COMPANION_KEY, COMPANION_BASE64_KEY = "companion:", "companion-base64:"
MAX_CARRIED_COMPANION_BYTES = 48 << 20
MAX_CONFIG_BYTES = 1 << 24


def _read_folder(folder: Path) -> Checkpoint:
    """A Hugging Face model folder (config.json and its weights), or a
    folder of shards with their index."""
    config_path = folder / CONFIG_NAME
    if not os.path.lexists(config_path):
        if os.path.lexists(folder / WEIGHTS_NAME):
            raise LgError(f"{shown(folder)}: a model folder must hold {CONFIG_NAME} beside {WEIGHTS_NAME}")
        return _read_sharded(folder)
    _regular_file(config_path, "a model's config")
    if config_path.stat().st_size > MAX_CONFIG_BYTES:
        raise LgError(f"{shown(config_path)}: over {MAX_CONFIG_BYTES} bytes: not a model config")
    config = load_json(config_path.read_bytes(), f"{shown(config_path)}: not a model config (the file")
    if not isinstance(config, dict):
        raise LgError(f"{shown(config_path)}: a model config must be a JSON object")
    if os.path.lexists(folder / SAFETENSORS_INDEX):
        checkpoint = _read_sharded(folder)
    elif os.path.lexists(folder / WEIGHTS_NAME):
        _regular_file(folder / WEIGHTS_NAME, "a model's weights")
        checkpoint = _read_safetensors_file(folder / WEIGHTS_NAME)
    elif os.path.lexists(folder / PICKLED_WEIGHTS_NAME):
        _regular_file(folder / PICKLED_WEIGHTS_NAME, "a model's weights")
        checkpoint = _read_pickle(folder / PICKLED_WEIGHTS_NAME)
    else:
        raise LgError(f"{shown(folder)}: holds {CONFIG_NAME} but no weights ({WEIGHTS_NAME}, "
                      f"{SAFETENSORS_INDEX} or {PICKLED_WEIGHTS_NAME})")
    checkpoint.source = str(folder)
    checkpoint.config = config
    checkpoint.companions = folder_companions(folder)
    return checkpoint


def is_companion_name(name: str) -> bool:
    """A name lg copies beside a model's weights: one of COMPANION_FILES, at
    the top or in a sentence-transformers module folder (never a path out)."""
    parts = name.split("/")
    if len(parts) == 1:
        return name in COMPANION_FILES
    return (len(parts) == 2 and bool(COMPANION_FOLDER.match(parts[0])) and parts[1] not in ("", ".", "..")
            and not parts[1].startswith(".") and "\\" not in parts[1] and parts[1].isprintable())


class CompanionFile:
    """A file beside a model's weights, opened once when its folder was read:
    without following a link (O_NOFOLLOW, the folder by descriptor), checked
    to be a regular file of a bounded size, and read or copied later from
    that descriptor. A name swapped for a link after the folder was read
    (`tokenizer.json` -> /etc/passwd) therefore cannot reach the output."""

    COPY_CHUNK = 1 << 20

    def __init__(self, fd: int, path: Path, size: int):
        self.fd, self.path, self.size = fd, path, size

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except (OSError, AttributeError, TypeError):
            pass

    def chunks(self) -> Iterator[bytes]:
        """The content, in order, as long as it was when opened (a file that
        changed length meanwhile is refused: what was checked is what is copied)."""
        offset = 0
        try:
            while offset < self.size:
                chunk = os.pread(self.fd, min(self.COPY_CHUNK, self.size - offset), offset)
                if not chunk:
                    break
                offset += len(chunk)
                yield chunk
            changed = offset != self.size or os.fstat(self.fd).st_size != self.size
        except OSError as exc:
            raise LgError(f"{shown(self.path)}: cannot read it ({os_reason(exc)})") from None
        if changed:
            raise LgError(f"{shown(self.path)}: changed while lg read it; nothing was written")

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def copy_to(self, target: Path) -> None:
        with open(target, "wb") as out:
            for chunk in self.chunks():
                out.write(chunk)


def companion_bytes(companions: Mapping[str, CompanionFile | bytes], name: str) -> bytes:
    """A companion's content, read from its folder or carried in memory."""
    item = companions[name]
    return item if isinstance(item, bytes) else item.read()


def companion_size(item: CompanionFile | bytes) -> int:
    return len(item) if isinstance(item, bytes) else item.size


def companion_metadata(companions: Mapping[str, CompanionFile | bytes]) -> tuple[dict[str, str], int]:
    """Metadata entries carrying `companions` in a single file, and how
    many bytes they hold; none when they hold more than a header takes."""
    total = sum(companion_size(item) for item in companions.values())
    if total > MAX_CARRIED_COMPANION_BYTES:  # said before anything is read
        return {}, total
    out = {}
    for name in sorted(companions):
        data = companion_bytes(companions, name)
        try:
            out[COMPANION_KEY + name] = data.decode("utf-8")
        except UnicodeDecodeError:  # a SentencePiece model, say
            out[COMPANION_BASE64_KEY + name] = base64.b64encode(data).decode("ascii")
    return out, total


def companions_from_metadata(metadata: Mapping[str, str], name: str = STDIO) -> dict[str, bytes]:
    """The companion files a single file carries (see `companion_metadata`);
    a name that is not one lg copies, or base64 that does not decode, is refused."""
    found: dict[str, bytes] = {}
    for key, value in metadata.items():
        if key.startswith(COMPANION_KEY):
            file, data = key[len(COMPANION_KEY):], value.encode("utf-8")
        elif key.startswith(COMPANION_BASE64_KEY):
            file = key[len(COMPANION_BASE64_KEY):]
            try:
                data = base64.b64decode(value.encode("ascii"), validate=True)
            except (ValueError, UnicodeEncodeError):
                raise LgError(f"{shown(_source_label(name))}: refused: metadata {shown(key)} is not base64") from None
        else:
            continue
        if not is_companion_name(file) or file in found:
            raise LgError(f"{shown(_source_label(name))}: refused: metadata {shown(key)} names a file lg does not "
                          f"carry beside a model")
        found[file] = data
    return found


def folder_companions(folder: Path) -> dict[str, CompanionFile]:
    """The files an output folder copies from this one, each opened now
    (`CompanionFile`): regular files only (a link could name anything on the
    machine), each of a bounded size, at most MAX_COMPANION_FILES of them
    and MAX_COMPANION_TOTAL_BYTES together (sizes are checked before
    anything is read)."""
    names = [name for name in COMPANION_FILES if os.path.lexists(folder / name)]
    for entry in sorted(os.listdir(folder)):
        sub = folder / entry
        if COMPANION_FOLDER.match(entry) and sub.is_dir() and not sub.is_symlink():
            names += [f"{entry}/{name}" for name in sorted(os.listdir(sub)) if not name.startswith(".")]
    if len(names) > MAX_COMPANION_FILES:
        raise LgError(f"{shown(folder)}: holds {len(names)} tokenizer and config files beside the model; lg copies "
                      f"at most {MAX_COMPANION_FILES}")
    found: dict[str, CompanionFile] = {}
    total = 0
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            found[name] = _open_companion(folder, folder_fd, name)
            total += found[name].size
            if total > MAX_COMPANION_TOTAL_BYTES:
                raise LgError(f"{shown(folder)}: the tokenizer and config files beside the model hold over "
                              f"{MAX_COMPANION_TOTAL_BYTES >> 20} MiB; not what lg copies beside a model")
    finally:
        os.close(folder_fd)
    return found


def _open_companion(folder: Path, folder_fd: int, name: str) -> CompanionFile:
    """Open `name` (``file`` or ``module/file``) inside the folder by
    descriptor, following no link on the way."""
    path = folder / name
    not_plain = f"{shown(path)}: is not a regular file; lg copies only plain files beside a model"
    *parents, base = name.split("/")
    parent_fd, fd = folder_fd, None
    try:
        for part in parents:
            parent_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        # O_NONBLOCK: a FIFO named tokenizer.json must not block the open.
        try:
            fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent_fd)
        except OSError as exc:
            # A Hugging Face cache snapshot's files are links into its blobs/ folder: those are followed.
            fd = open_snapshot_link(folder, name) if exc.errno == errno.ELOOP else None
            if fd is None:
                raise
        info = os.fstat(fd)
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR):
            raise LgError(not_plain) from None
        raise LgError(f"{shown(path)}: cannot read it ({os_reason(exc)})") from None
    finally:
        if parent_fd != folder_fd:
            os.close(parent_fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise LgError(not_plain)
    if info.st_size > MAX_COMPANION_BYTES:
        os.close(fd)
        raise LgError(f"{shown(path)}: over {MAX_COMPANION_BYTES >> 20} MiB; not a tokenizer or config file")
    return CompanionFile(fd, path, info.st_size)


def _read_sharded(folder: Path) -> Checkpoint:
    index_path = folder / SAFETENSORS_INDEX
    if not os.path.lexists(index_path):
        raise LgError(f"{shown(folder)}: a folder must hold a Hugging Face model ({CONFIG_NAME} and its weights) "
                      f"or {SAFETENSORS_INDEX} (a sharded safetensors checkpoint)")
    _regular_file(index_path, "a sharded checkpoint's index")
    raw = index_path.read_bytes() if index_path.stat().st_size <= MAX_HEADER_BYTES else None
    if raw is None:
        raise LgError(f"{shown(index_path)}: an index over {MAX_HEADER_BYTES} bytes is not a safetensors index")
    index = load_json(raw, f"{shown(index_path)}: not a safetensors index (the file")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise LgError(f"{shown(index_path)}: not a safetensors index (expected a JSON object whose 'weight_map' "
                      f"maps tensor names to shard files)")
    index_meta = index.get("metadata") or {}
    if not isinstance(index_meta, dict):
        raise LgError(f"{shown(index_path)}: the index's 'metadata' must be a JSON object")
    digest = hashlib.sha256(raw)
    tensors: dict[str, torch.Tensor] = {}
    locations: dict[str, tuple[BinaryIO, int]] = {}
    metadata: dict[str, str] = {}
    nbytes = 0
    root = folder.resolve()
    blobs = snapshot_blobs(folder)  # a cached snapshot's shards are links into its blobs/ folder
    for shard in sorted(set(weight_map.values())):
        shard_path = (folder / shard).resolve()
        if root not in shard_path.parents and (blobs is None or shard_path.parent != blobs):
            raise LgError(f"{shown(index_path)}: shard {shown(shard)} lies outside the folder")
        if not shard_path.exists():
            raise LgError(f"{shown(index_path)}: names shard {shown(shard)}, which does not exist")
        _regular_file(shard_path, "a shard")
        part = _read_safetensors_file(shard_path)
        digest.update(bytes.fromhex(part.sha256))
        for key, tensor in part.tensors.items():
            if key in tensors:
                raise LgError(f"{shown(index_path)}: tensor {shown(key)} is in more than one shard")
            if weight_map.get(key) != shard:
                raise LgError(f"{shown(index_path)}: shard {shown(shard)} holds {shown(key)}, which the index "
                              f"places {'elsewhere' if key in weight_map else 'nowhere'}")
            tensors[key] = tensor
        locations.update(part.locations)
        metadata = metadata or part.metadata
        nbytes += part.nbytes
    missing = [k for k in weight_map if k not in tensors]
    if missing:
        raise LgError(f"{shown(index_path)}: {len(missing)} tensors listed but not in their shards "
                      f"(first: {shown(missing[0])})")
    metadata = {**{str(k): str(v) for k, v in index_meta.items() if isinstance(v, str)}, **metadata}
    return Checkpoint(tensors=tensors, metadata=metadata, digest=digest.hexdigest(),
                      source=str(folder), nbytes=nbytes, locations=locations)


def _read_pickle(path: Path) -> Checkpoint:
    # weights_only=True: the unpickler only rebuilds tensors and plain
    # containers, so a checkpoint that carries code cannot run it. torch's
    # own warnings (old protocols, storage types) are not the user's concern.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = _one_line(exc).split(". ")[0]
        raise LgError(f"{shown(path)}: refused: the pickle holds more than tensors, and lg never "
                      f"unpickles code ({first})") from None
    except RecursionError:
        raise LgError(f"{shown(path)}: refused: the pickle is nested too deeply") from None
    except MemoryError:
        raise LgError(f"{shown(path)}: refused: the pickle asks for more memory than there is") from None
    except Exception as exc:  # torch raises a variety of types on garbage
        raise LgError(f"{shown(path)}: not a readable PyTorch checkpoint ({_one_line(exc)})") from None
    state = unwrap_state_dict(obj, str(path))
    return Checkpoint(tensors=state, metadata={}, digest=_sha256_file(path), source=str(path),
                      nbytes=path.stat().st_size)


def unwrap_state_dict(obj: Any, name: str) -> dict[str, torch.Tensor]:
    """The state dict inside a training checkpoint, with wrapper prefixes removed.

    Follows at most MAX_WRAPPERS wrapper keys and refuses a container that
    holds itself (a pickle can build ``d['model'] is d``)."""
    seen: set[int] = set()
    while isinstance(obj, Mapping):
        if id(obj) in seen or len(seen) >= MAX_WRAPPERS:
            raise LgError(f"{shown(name)}: refused: its wrappers ({'/'.join(WRAPPER_KEYS)}) "
                          f"{'contain themselves' if id(obj) in seen else 'nest too deeply'}")
        seen.add(id(obj))
        inner = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, Mapping):
        raise LgError(f"{shown(name)}: expected a state dict (a mapping of names to tensors), "
                      f"found {type(obj).__name__}")
    out: dict[str, torch.Tensor] = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise LgError(f"{shown(name)}: a state dict's keys are names; found the {type(key).__name__} "
                          f"{shown(repr(key)[:40])}")
        if not isinstance(value, torch.Tensor):
            raise LgError(f"{shown(name)}: entry {shown(key)} is a {type(value).__name__}, not a tensor")
        if value.layout != torch.strided:
            raise LgError(f"{shown(name)}: entry {shown(key)} is a sparse tensor ({value.layout}); "
                          f"lg reads dense tensors only (call .to_dense() and save again)")
        if value.device.type == "meta":
            raise LgError(f"{shown(name)}: entry {shown(key)} is a tensor on the meta device, which holds no "
                          f"values: this state dict describes a model without its weights")
        if value.dtype not in DTYPE_NAMES:
            raise LgError(f"{shown(name)}: entry {shown(key)} has dtype {value.dtype}, which lg does not read "
                          f"(known: {', '.join(DTYPES)})")
        clean = key
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if clean.startswith(prefix):
                    clean, stripped = clean[len(prefix):], True
        if clean in out:
            raise LgError(f"{shown(name)}: entries {shown(key)} and another both name {shown(clean)} once "
                          f"{'/'.join(WRAPPER_PREFIXES)} prefixes are removed")
        out[clean] = value
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return one_line(text[0]) if text else "no details"


# ---------------------------------------------------------------- writing

def check_output(destination: str | os.PathLike, *, force: bool,
                 inputs: tuple[str | os.PathLike, ...] = (), folder: bool | None = None) -> None:
    """Refuse an output that exists (without force), is an input, or cannot be written.

    `folder`: whether the output is a model folder (a Hugging Face model),
    one file (a timm checkpoint), or not known yet (None). Called before any
    work, so a bad output path fails fast; the writer checks again.
    """
    dst = str(destination)
    if dst == STDIO:
        return
    path = Path(dst)
    if dst.endswith(("/", os.sep)) and folder is False:
        raise LgError(f"{shown(dst)}: names a folder; this model is one file: give a file name for the output")
    if folder and path.suffix == ".safetensors" and not path.is_dir():
        raise LgError(f"{shown(dst)}: a Hugging Face model is written as a folder (config.json, weights, "
                      f"tokenizer) that from_pretrained loads: give a folder name, or -o - for a pipe")
    for src in inputs:
        _refuse_output_over_input(path, str(src))
    if os.path.lexists(path):
        kind = _not_a_file_or_folder(os.lstat(path).st_mode)
        if kind:  # cp writes through a device, mv replaces it; lg does neither
            raise LgError(f"{shown(dst)}: is {kind}, not a file; lg writes only files and model folders "
                          f"(for a pipe, use -o -)")
    if path.is_dir() and not path.is_symlink():
        reason = _not_replaceable(path)
        if reason:
            raise LgError(f"{shown(dst)}: {reason}; lg replaces only a model folder it could have written, and "
                          f"never deletes anything else: choose another output")
    if os.path.lexists(path) and not force:
        raise LgError(f"{shown(dst)}: exists; pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise LgError(f"{shown(dst)}: folder {shown(parent)} does not exist")


# What a model folder may hold besides the files lg writes: what a Hugging
# Face snapshot adds (replacing the folder loses nothing that was not downloaded).
HUB_FILES = ("README.md", ".gitattributes")
WEIGHT_FILE = re.compile(r"^(model|pytorch_model)(-[0-9]{5}-of-[0-9]{5})?\.(safetensors|bin)(\.index\.json)?$",
                         re.ASCII)


def _not_replaceable(path: Path) -> str | None:
    """Why the folder `path` is not a model folder lg may replace (None when
    it is): it must hold a model (a Hugging Face config.json naming its
    model_type, or a shard index with a weight map) with its weights, and
    nothing but the files lg writes beside them (and a hub's README)."""
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        return f"is a folder lg cannot list ({os_reason(exc)})"
    if not entries:
        return "is an empty folder"
    described = _json_object(path / CONFIG_NAME)
    index = _json_object(path / SAFETENSORS_INDEX)
    if not (isinstance(described.get("model_type"), str) or isinstance(index.get("weight_map"), dict)):
        return (f"is a folder that holds no model (no {CONFIG_NAME} naming a model_type, no {SAFETENSORS_INDEX} "
                f"with a weight map)")
    if not any(WEIGHT_FILE.match(name) for name in entries):
        return "is a folder that holds a model's config but no weights"
    for name in entries:
        entry = path / name
        known = (name == CONFIG_NAME or name in HUB_FILES or WEIGHT_FILE.match(name)
                 or (is_companion_name(name) and entry.is_file() and not entry.is_symlink())
                 or (COMPANION_FOLDER.match(name) and entry.is_dir() and not entry.is_symlink()
                     and all(is_companion_name(f"{name}/{inner}") for inner in os.listdir(entry))))
        if not known:
            return f"holds {shown(name)}, which is not part of a model lg writes"
    return None


def _json_object(path: Path) -> dict:
    """A small JSON file's object, or {} (missing, unreadable, not an object)."""
    try:
        if not path.is_file() or path.stat().st_size > 1 << 24:
            return {}
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _not_a_file_or_folder(mode: int) -> str | None:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def _refuse_output_over_input(path: Path, src: str) -> None:
    """The output may not be an input, lie inside an input folder (a shard,
    its config or tokenizer), or be a folder that holds an input: each would
    modify or delete what is being read (`lg shrink m -o m/config.json`).
    For stdin, the file the shell redirected (``< v.safetensors``)."""
    dst = shown(str(path))
    if src == STDIO:
        try:
            given = os.fstat(sys.stdin.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return  # not a file descriptor (a notebook, a test): nothing on disk to protect
        if os.path.exists(path) and stat.S_ISREG(given.st_mode):
            here = os.stat(path)
            if (here.st_dev, here.st_ino) == (given.st_dev, given.st_ino):
                raise LgError(f"{dst}: the output is the file on stdin; lg never modifies its inputs")
        return
    source = Path(src)
    if not source.exists():
        return
    if path.exists() and path.samefile(source):
        raise LgError(f"{dst}: the output is an input; lg never modifies its inputs")
    # A shard index reads the folder it is in.
    folder = source if source.is_dir() else (source.parent if source.name.endswith(".index.json") else None)
    target = _resolved(path)
    if folder is not None and _inside(target, folder.resolve()):
        raise LgError(f"{dst}: is inside the input folder {shown(str(folder))}; lg never modifies its inputs: "
                      f"write the output elsewhere")
    if path.is_dir() and _inside(source.resolve(), target):
        raise LgError(f"{dst}: the output folder holds the input {shown(src)}; replacing it would delete the input")


def _resolved(path: Path) -> Path:
    """`path` made absolute through its existing folders (the last part may not exist yet)."""
    return path.parent.resolve() / path.name if not path.exists() else path.resolve()


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def write_checkpoint(destination: str | os.PathLike, tensors: Mapping[str, torch.Tensor],
                     metadata: Mapping[str, str], *, force: bool = False,
                     stdout: BinaryIO | None = None) -> str:
    """Write tensors and metadata as safetensors; returns the written bytes' sha256.

    The file is streamed tensor by tensor from the tensors' own memory (views
    of one storage are fine), hashed on the way in a second thread: no copy
    of the whole model is made. Largest element size first, then by name, as
    safetensors orders them.
    """
    _check_names(tensors)
    ordered = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    entries = [(key, tensor.dtype, tuple(tensor.shape)) for key, tensor in ordered]
    return write_tensors(destination, entries, iter(ordered), metadata, force=force, stdout=stdout)


# Shard names as Hugging Face's save_pretrained writes them (whose default
# shard size, 5GB, is the CLI's --shard-size default).
SHARD_NAME = "model-{:05d}-of-{:05d}.safetensors"

Entry = tuple[str, torch.dtype, tuple[int, ...]]


def write_tensors(destination: str | os.PathLike, entries: list[Entry],
                  tensors: Iterable[tuple[str, torch.Tensor]], metadata: Mapping[str, str], *,
                  force: bool = False, stdout: BinaryIO | None = None, shard_size: int | None = None,
                  final_metadata: Callable[[], Mapping[str, str]] | None = None,
                  folder_files: Mapping[str, "bytes | CompanionFile"] | None = None) -> str:
    """Write safetensors whose names, dtypes and shapes (`entries`, in file
    order) are known before any tensor is: the header goes first, then each
    tensor as `tensors` yields it (in the same order; a float tensor is cast
    to its entry's dtype on the way), so nothing waits for the whole model
    and only the tensor being written need exist. Returns the sha256 of what
    was written (for a sharded folder, as `read_checkpoint` computes it).

    Past `shard_size` bytes (never for '-'), the output is a folder of
    shards with a Hugging Face index, as `save_pretrained` writes one. Files
    go to a temporary name and are renamed when complete and read back: an
    interrupted write leaves nothing behind.

    `final_metadata`, when given, is the metadata to end with, and `metadata`
    a stand-in of the same encoded length (a source hash still being
    computed): a single output file is then written at once with the
    stand-in and its header rewritten in place at the end, so that the work
    does not wait for the hash; the file is then hashed by reading it back.
    A stream or a folder waits for it instead.

    `folder_files` (name -> bytes) makes the output a Hugging Face model
    folder (unless it is '-'): those files (config.json, tokenizer files),
    and the weights as ``model.safetensors`` or as shards with their index.
    """
    dst = str(destination)
    as_folder = folder_files is not None and dst != STDIO
    shards = [entries] if dst == STDIO else _shards(entries, shard_size)
    if final_metadata is not None and (dst == STDIO or len(shards) > 1 or as_folder):
        metadata, final_metadata = final_metadata(), None
    meta = {"format": "pt", **dict(metadata)}
    _check_names({key: None for key, _, _ in entries})
    stream_of = _checked_stream(entries, tensors)
    if dst == STDIO:
        header, encoded = _header(entries, meta)
        stream = stdout if stdout is not None else sys.stdout.buffer
        digest = _stream_safetensors(stream, encoded, stream_of(len(entries)))
        stream.flush()
        return digest
    check_output(dst, force=force, folder=as_folder)
    path = Path(dst.rstrip("/" + os.sep) or dst)
    total = sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in entries)
    if as_folder:
        _check_disk(path, total + len(shards) * (8 + MAX_HEADER_BYTES // 1000)
                    + sum(companion_size(data) for data in folder_files.values()))
        with atomic_folder(path, force=force, output=True) as tmp:
            if len(shards) == 1:
                header, encoded = _header(entries, meta)
                with open(tmp / WEIGHTS_NAME, "wb") as out:
                    digest = _stream_safetensors(out, encoded, stream_of(len(entries)))
                _verify_written(tmp / WEIGHTS_NAME, header, f"{dst}/{WEIGHTS_NAME}")
            else:
                digest = _write_shards(tmp, shards, meta, stream_of, dst)
            for name, data in folder_files.items():
                target = tmp / name
                if Path(name).is_absolute() or ".." in Path(name).parts:  # a bug, not a user error
                    raise ValueError(f"folder file {name!r} is not inside the folder")
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(data, bytes):
                    target.write_bytes(data)
                else:  # streamed from the descriptor opened when the source was read
                    data.copy_to(target)
        return digest
    if len(shards) == 1:
        header, encoded = _header(entries, meta)
        _check_disk(path, 8 + len(encoded) + total)
        with atomic_path(path, output=True) as tmp:
            # "r+b", not "wb": the temporary file exists (empty), and truncating
            # a file makes ext4 flush it to disk on close (auto_da_alloc), which
            # costs about a second per GB before the rename.
            with open(tmp, "r+b") as out:
                digest = _stream_safetensors(out, encoded, stream_of(len(entries)), hashed=final_metadata is None)
                if final_metadata is not None:
                    header, final = _header(entries, {"format": "pt", **dict(final_metadata())})
                    if len(final) != len(encoded):  # a bug in the stand-in, not a user error
                        raise RuntimeError("the final metadata does not have the stand-in's length")
                    out.seek(8)
                    out.write(final)
            if final_metadata is not None:
                digest = _sha256_file(tmp)
            _verify_written(tmp, header, dst)
            if path.exists() and not force:  # appeared while we worked
                raise LgError(f"{shown(dst)}: exists; pass --force to overwrite it")
        return digest
    _check_disk(path, total + len(shards) * (8 + MAX_HEADER_BYTES // 1000))
    with atomic_folder(path, force=force, output=True) as tmp:
        return _write_shards(tmp, shards, meta, stream_of, dst)


def _write_shards(folder: Path, shards: list[list[Entry]], meta: Mapping[str, str], stream_of, dst: str) -> str:
    """Shards and their index, as save_pretrained names them, into `folder`;
    returns the digest `read_checkpoint` computes for the folder."""
    total = sum(math.prod(shape) * dtype.itemsize for part in shards for _, dtype, shape in part)
    names = [SHARD_NAME.format(i + 1, len(shards)) for i in range(len(shards))]
    index = {"metadata": {"total_size": total},
             "weight_map": {key: name for name, part in zip(names, shards) for key, _, _ in part}}
    raw_index = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
    digests = {}
    for name, part in zip(names, shards):
        header, encoded = _header(part, meta)
        with open(folder / name, "wb") as out:
            digests[name] = _stream_safetensors(out, encoded, stream_of(len(part)))
        _verify_written(folder / name, header, f"{dst}/{name}")
    (folder / SAFETENSORS_INDEX).write_bytes(raw_index)
    digest = hashlib.sha256(raw_index)
    for name in sorted(digests):
        digest.update(bytes.fromhex(digests[name]))
    return digest.hexdigest()


def _shards(entries: list[Entry], shard_size: int | None) -> list[list[Entry]]:
    """Entries split in file order into parts of at most `shard_size` bytes
    (a tensor larger than that is a shard of its own), as Hugging Face does."""
    if not shard_size:
        return [entries]
    parts: list[list[Entry]] = [[]]
    size = 0
    for entry in entries:
        nbytes = math.prod(entry[2]) * entry[1].itemsize
        if parts[-1] and size + nbytes > shard_size:
            parts.append([])
            size = 0
        parts[-1].append(entry)
        size += nbytes
    return parts


def _checked_stream(entries: list[Entry], tensors: Iterable[tuple[str, torch.Tensor]]):
    """`take(n)`: the next n tensors of `tensors`, each checked against its
    entry (name, shape) and cast to its dtype; a producer that yields
    something else is a bug in lg, reported as one."""
    source = iter(tensors)
    position = [0]

    def take(count: int) -> Iterator[torch.Tensor]:
        for _ in range(count):
            key, dtype, shape = entries[position[0]]
            found = next(source, None)
            if found is None or found[0] != key or tuple(found[1].shape) != shape:
                got = "nothing" if found is None else f"{found[0]} {tuple(found[1].shape)}"
                raise RuntimeError(f"writing {key} {shape}: the producer gave {got}")
            tensor = found[1]
            if tensor.dtype != dtype:
                tensor = tensor.to(dtype)
            position[0] += 1
            yield tensor
        if position[0] == len(entries) and next(source, None) is not None:
            raise RuntimeError("the producer gave more tensors than the header lists")

    return take


def _check_names(tensors: Mapping[str, Any]) -> None:
    for key, tensor in tensors.items():
        if not isinstance(key, str) or not key or key == "__metadata__" or not valid_unicode(key):
            raise LgError(f"cannot write tensor name {shown(key)}: not a valid safetensors name")
        if tensor is not None and not isinstance(tensor, torch.Tensor):
            raise LgError(f"cannot write {key!r}: a {type(tensor).__name__}, not a tensor")
        if tensor is not None and tensor.dtype not in DTYPE_NAMES:
            raise LgError(f"cannot write {key!r}: dtype {tensor.dtype} has no safetensors name")


@contextlib.contextmanager
def atomic_folder(path: Path, *, force: bool, output: bool = False) -> Iterator[Path]:
    """A temporary folder beside `path` to write a sharded checkpoint into;
    it replaces `path` when the block succeeds (an existing checkpoint folder
    or file only with `force`) and is removed when it fails."""
    parent = path.parent if str(path.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path.name, ".tmp"), suffix=".tmp", dir=parent))
    os.chmod(tmp, 0o777 & ~_current_umask())
    try:
        yield tmp
        if os.path.lexists(path) and not force:  # appeared while we worked
            raise LgError(f"{shown(path)}: exists; pass --force to overwrite it")
        _put_in_place(tmp, path, output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _check_disk(path: Path, nbytes: int) -> None:
    try:
        free = shutil.disk_usage(path.parent if str(path.parent) else ".").free
    except OSError:
        return
    if nbytes > free:
        raise LgError(f"{shown(path)}: the output needs {_gib(nbytes)} and its disk has {_gib(free)} free")


def _verify_written(tmp: Path, header: Mapping[str, Any], dst: str) -> None:
    """Read the written file's header back, as a strict reader would, and
    check every tensor's name, dtype, shape and place, and the metadata
    (what safetensors' own convert.py does after writing)."""
    with open(tmp, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        length = header_length(f.read(8), dst, total)
        written = parse_header(f.read(length), dst)
    check_data_size(written, total - written.data_start, dst)
    meant = {k: (e["dtype"], tuple(e["shape"]), tuple(e["data_offsets"]))
             for k, e in header.items() if k != "__metadata__"}
    found = {e.name: (e.dtype, e.shape, (e.begin, e.end)) for e in written.entries}
    if found != meant or written.metadata != header["__metadata__"]:
        wrong = sorted(set(found.items()) ^ set(meant.items()))
        raise LgError(f"{shown(dst)}: the written file did not read back as meant "
                      f"({shown(wrong[0][0]) if wrong else 'metadata'}); nothing was written")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, output: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed over `path` when the
    block succeeds, removed when it fails, so nothing half-written is left.
    The file gets the mode a plain open() would give (mkstemp's is 0600).
    `output`: the command's output (a signal after its rename is said to
    have come after it was written)."""
    path = Path(path)
    suffix = ".tmp" + path.suffix
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path.name, suffix), suffix=suffix,
                               dir=path.parent if str(path.parent) else ".")
    os.fchmod(fd, 0o666 & ~_current_umask())
    os.close(fd)
    try:
        yield Path(tmp)
        _put_in_place(Path(tmp), path, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# Checkpoints and learngenes this process renamed into place, for the
# message when a signal comes after the rename (the output is whole).
committed_outputs: list[str] = []
# While an output is put in place, the exception a signal handler raises
# (lgcli.cli's) waits here and is raised once it is in place: between moving
# an old output aside and renaming the new one over it, an interrupt would
# leave neither. (Blocking the signal would not do: the kernel hands a
# process's signal to any thread that does not block it, and Python then
# runs the handler in the main thread all the same.)
_holding: list[bool] = []
_deferred: list[BaseException] = []


def raise_or_defer(exc: BaseException) -> None:
    """For a signal handler: raise `exc` now, or once the output being put
    in place is (see `_signals_held`)."""
    if _holding:
        _deferred.append(exc)
        return
    raise exc


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    _holding.append(True)
    try:
        yield
    finally:
        _holding.pop()
    if not _holding and _deferred:
        raise _deferred.pop(0)


def _put_in_place(tmp: Path, path: Path, output: bool = False) -> None:
    """Rename `tmp` over `path`; an existing folder (or, for a folder, any
    existing output) is moved aside first and removed once the new one is in
    place. Signals wait until the output is in place."""
    trash = None
    try:
        with _signals_held():
            replacing = os.path.lexists(path) and (tmp.is_dir() or (path.is_dir() and not path.is_symlink()))
            trash = _move_aside(path) if replacing else None
            os.replace(tmp, path)
            if output:
                committed_outputs.append(str(path))
    finally:  # the old output, moved aside, goes even when a waiting signal is raised now
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)


# A file name's bytes (ext4, xfs, btrfs): a temporary name beside the output
# keeps within it however long the output's name is.
NAME_MAX = 255


def _temporary_prefix(name: str, suffix: str) -> str:
    """``.NAME.``, NAME cut so that prefix, mkstemp's 8 characters and
    `suffix` fit in NAME_MAX bytes (a 238-character output name was refused)."""
    room = NAME_MAX - len(suffix.encode()) - 8 - 2
    cut = name.encode(errors="surrogateescape")[:max(room, 1)].decode(errors="ignore") or "out"
    return f".{cut}."


def _move_aside(path: Path) -> Path:
    """Move an output being replaced into a new hidden folder beside it, to be
    removed once the new output is in place; returns that folder."""
    trash = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path.name, ".old"), suffix=".old",
                                  dir=path.parent if str(path.parent) else "."))
    os.replace(path, trash / path.name)
    return trash


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


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _header(entries: list[Entry], metadata: Mapping[str, str]) -> tuple[dict[str, Any], bytes]:
    """The safetensors header for tensors written in `entries`' order, and its
    encoding (once: sized for the disk check, then written).

    Every offset must be a multiple of its tensor's element size (readers map
    tensors without copying): lg writes one float dtype per file, and a
    caller mixing sizes orders them largest first, as safetensors does."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for key, dtype, shape in entries:
        if key in header:
            raise LgError(f"cannot write tensor name {shown(key)} twice")
        if offset % dtype.itemsize:
            raise RuntimeError(f"{key}: offset {offset} is not a multiple of its element size")
        nbytes = math.prod(shape) * dtype.itemsize
        header[key] = {"dtype": DTYPE_NAMES[dtype], "shape": list(shape),
                       "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    return header, _encode_header(header)


def _encode_header(header: Mapping[str, Any]) -> bytes:
    encoded = json.dumps(header, separators=(",", ":")).encode()
    return encoded + b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes


def _stream_safetensors(stream: BinaryIO, encoded: bytes, ordered: Iterable[torch.Tensor],
                        hashed: bool = True) -> str:
    """Write the prefix, the header and every tensor; returns the sha256 of
    what was written (hashed in a second thread), or "" when not `hashed`."""
    digest = hashlib.sha256()
    prefix = struct.pack("<Q", len(encoded)) + encoded
    stream.write(prefix)
    digest.update(prefix)
    pending: Future | None = None
    for tensor in ordered:
        if not hashed:
            stream.write(_raw_bytes(tensor))
            continue
        data = _raw_bytes(tensor)
        if pending is not None:
            pending.result()  # the digest must see the chunks in file order
        pending = _HASHER.submit(digest.update, data)
        stream.write(data)
    if pending is not None:
        pending.result()
    return digest.hexdigest() if hashed else ""


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes in native (little-endian) order, without a copy when
    it is already contiguous on the CPU."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy())


__all__ = ["Checkpoint", "read_checkpoint", "write_checkpoint", "check_output",
           "provenance_metadata", "provenance_chain", "decode_lg_metadata", "encode_lg_metadata",
           "unwrap_state_dict", "read_bytes", "STDIO"]
