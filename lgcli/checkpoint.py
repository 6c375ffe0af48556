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

Writes are atomic (a temporary file in the destination folder, then a
rename), an existing output is refused without ``force``, and an input is
never opened for writing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import pickle
import struct
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load as safetensors_load_bytes

from . import __version__
from .errors import LgError

STDIO = "-"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# safetensors refuses headers over 100 MB (MAX_HEADER_SIZE in its Rust core);
# we check first so the user gets a sentence rather than a Rust error.
MAX_HEADER_BYTES = 100_000_000
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
HASH_CHUNK = 1 << 24


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

    def release_pages(self) -> None:
        """Let the kernel drop this process's copies of the mapped file pages.

        Call it once the tensors have been copied elsewhere (an adapter's
        stacks): the pages no longer count towards the process's memory, and
        a tensor read again later is faulted back in from the file unchanged
        (the mapping is private and was never written).
        """
        if self.mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
            self.mapping.madvise(mmap.MADV_DONTNEED)

    @property
    def sha256(self) -> str:
        if isinstance(self.digest, Future):
            self.digest = self.digest.result()
        return self.digest

    @property
    def lg(self) -> dict[str, Any]:
        """lg's own metadata, with JSON values decoded ({} for foreign files)."""
        return decode_lg_metadata(self.metadata)


def decode_lg_metadata(metadata: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not key.startswith(LG_PREFIX):
            continue
        name = key[len(LG_PREFIX):]
        if name in JSON_KEYS:
            try:
                out[name] = json.loads(value)
            except json.JSONDecodeError:
                raise LgError(f"metadata key {key!r} is not valid JSON") from None
        else:
            out[name] = value
    return out


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
                        learngene: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a file lg writes, chained to its source."""
    lg: dict[str, Any] = {"kind": kind, "family": family, "config": dict(config),
                          "method": method, "options": dict(options) if options else None,
                          "learngene": dict(learngene) if learngene else None, "version": __version__}
    if source is not None:
        lg["source_sha256"] = source.sha256
        parent = source.lg
        # A foreign source (no lg metadata) is still recorded by hash and name.
        lg["source"] = parent if parent else {"file": _display_name(source.source)}
        if parent:
            lg["source"].setdefault("file", _display_name(source.source))
    return encode_lg_metadata(lg)


def provenance_chain(lg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Steps from this file back to its first recorded ancestor."""
    steps = []
    node: Mapping[str, Any] | None = lg
    while node:
        steps.append({k: node.get(k) for k in ("file", "kind", "method", "options",
                                                "source_sha256", "version") if node.get(k) is not None})
        node = node.get("source") if isinstance(node.get("source"), Mapping) else None
    return steps


def _display_name(source: str) -> str:
    return "<stdin>" if source == STDIO else os.path.basename(str(source).rstrip("/"))


# ---------------------------------------------------------------- reading

def read_checkpoint(source: str | os.PathLike, *, stdin: BinaryIO | None = None) -> Checkpoint:
    """Read a checkpoint from a path, a sharded folder, or '-' (stdin)."""
    src = str(source)
    if src == STDIO:
        stream = stdin if stdin is not None else sys.stdin.buffer
        data = stream.read()
        return _read_safetensors_bytes(data, STDIO)
    path = Path(src)
    if not path.exists():
        raise LgError(f"{src}: no such file or folder")
    if path.is_dir():
        return _read_sharded(path)
    if path.suffix in PICKLE_SUFFIXES and not _looks_like_safetensors(path):
        return _read_pickle(path)
    return _read_safetensors_file(path)


def _looks_like_safetensors(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def _parse_header(prefix: bytes, total: int, name: str) -> dict[str, Any]:
    """Check a safetensors header before the library sees it."""
    if total < 8:
        raise LgError(f"{name}: not a safetensors file ({total} bytes, too short for a header)")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES:
        raise LgError(f"{name}: not a safetensors file (header claims {length} bytes; "
                      f"safetensors allows at most {MAX_HEADER_BYTES})")
    if 8 + length > total:
        raise LgError(f"{name}: truncated or not safetensors (header claims {length} bytes, "
                      f"the file has {total - 8} after the length)")
    try:
        header = json.loads(prefix[8:8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LgError(f"{name}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise LgError(f"{name}: not a safetensors file (its header is not a JSON object)")
    meta = header.get("__metadata__", {}) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise LgError(f"{name}: __metadata__ must map strings to strings")
    return header


def _read_safetensors_bytes(data: bytes, name: str) -> Checkpoint:
    label = "<stdin>" if name == STDIO else name
    if len(data) == 0:
        raise LgError(f"{label}: empty input (expected a safetensors checkpoint)")
    header = _parse_header(data[:8 + MAX_HEADER_BYTES], len(data), label)
    try:
        tensors = safetensors_load_bytes(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise LgError(f"{label}: corrupt safetensors data ({_one_line(exc)})") from None
    return Checkpoint(tensors=dict(tensors), metadata=dict(header.get("__metadata__", {}) or {}),
                      digest=hashlib.sha256(data).hexdigest(), source=name, nbytes=len(data))


def _read_safetensors_file(path: Path) -> Checkpoint:
    """Tensors as zero-copy views of a private memory map of the file.

    ACCESS_COPY makes the mapping copy-on-write: tensors are writable, and a
    write never reaches the file (inputs are never modified). Pages are read
    on first touch, so a method that handles one role at a time never holds
    the whole input in memory twice.
    """
    total = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) == 8:
            (length,) = struct.unpack("<Q", prefix)
            prefix += f.read(min(length, MAX_HEADER_BYTES + 1))
        header = _parse_header(prefix, total, str(path))
        data_start = 8 + struct.unpack("<Q", prefix[:8])[0]
        entries = _tensor_entries(header, total - data_start, str(path))
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if total else None
    tensors: dict[str, torch.Tensor] = {}
    for key, dtype, shape, begin, end in entries:
        tensors[key] = _tensor_from_buffer(mapped, dtype, shape, data_start + begin, end - begin)
    return Checkpoint(tensors=tensors, metadata=dict(header.get("__metadata__", {}) or {}),
                      digest=_hash_in_background(mapped), source=str(path), nbytes=total,
                      mapping=mapped)


def _tensor_entries(header: Mapping[str, Any], data_bytes: int, name: str):
    """(key, dtype, shape, begin, end) per tensor, refusing byte ranges that fall
    outside the file (truncation) or do not match the dtype and shape."""
    entries = []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            begin, end = (int(v) for v in info["data_offsets"])
            shape = [int(n) for n in info["shape"]]
            dtype_name = info["dtype"]
        except (TypeError, KeyError, ValueError):
            raise LgError(f"{name}: corrupt safetensors header (entry {key!r} lacks dtype, shape "
                          f"or data_offsets)") from None
        if dtype_name not in DTYPES:
            raise LgError(f"{name}: tensor {key!r} has dtype {dtype_name}, which lg does not read "
                          f"(known: {', '.join(DTYPES)})")
        if not (0 <= begin <= end <= data_bytes):
            raise LgError(f"{name}: truncated or corrupt (tensor {key!r} needs bytes {begin}..{end}, "
                          f"the file holds {data_bytes})")
        dtype = DTYPES[dtype_name]
        numel = 1
        for n in shape:
            numel *= n
        if any(n < 0 for n in shape) or numel * dtype.itemsize != end - begin:
            raise LgError(f"{name}: corrupt safetensors header (tensor {key!r} of shape {shape} "
                          f"and dtype {dtype_name} cannot fill {end - begin} bytes)")
        entries.append((key, dtype, shape, begin, end))
    return entries


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


_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lg-sha256")


def _hash_in_background(buffer) -> Future:
    def digest() -> str:
        h = hashlib.sha256()
        if buffer is not None:
            view = memoryview(buffer)
            for start in range(0, len(view), HASH_CHUNK):
                h.update(view[start:start + HASH_CHUNK])
            view.release()
        return h.hexdigest()

    return _HASHER.submit(digest)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_sharded(folder: Path) -> Checkpoint:
    index_path = folder / SAFETENSORS_INDEX
    if not index_path.exists():
        raise LgError(f"{folder}: a folder must hold {SAFETENSORS_INDEX} (a sharded safetensors checkpoint)")
    try:
        index = json.loads(index_path.read_text())
        weight_map = index["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise LgError(f"{index_path}: not a safetensors index (expected a JSON object with 'weight_map')") from None
    shards = sorted(set(weight_map.values()))
    digest = hashlib.sha256(index_path.read_bytes())
    tensors: dict[str, torch.Tensor] = {}
    metadata: dict[str, str] = {}
    nbytes = 0
    for shard in shards:
        shard_path = (folder / shard).resolve()
        if folder.resolve() not in shard_path.parents:
            raise LgError(f"{index_path}: shard {shard!r} lies outside the folder")
        part = _read_safetensors_file(shard_path)
        digest.update(bytes.fromhex(part.sha256))
        tensors.update(part.tensors)
        metadata = metadata or part.metadata
        nbytes += part.nbytes
    missing = [k for k in weight_map if k not in tensors]
    if missing:
        raise LgError(f"{index_path}: {len(missing)} tensors listed but not in their shards (first: {missing[0]})")
    index_meta = index.get("metadata") or {}
    metadata = {**{k: str(v) for k, v in index_meta.items()}, **metadata}
    return Checkpoint(tensors=tensors, metadata=metadata, digest=digest.hexdigest(),
                      source=str(folder), nbytes=nbytes)


def _read_pickle(path: Path) -> Checkpoint:
    # weights_only=True: the unpickler only rebuilds tensors and plain
    # containers, so a checkpoint that carries code cannot run it.
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = _one_line(exc).split(". ")[0]
        raise LgError(f"{path}: refused: the pickle holds more than tensors, and lg never "
                      f"unpickles code ({first})") from None
    except Exception as exc:  # torch raises a variety of types on garbage
        raise LgError(f"{path}: not a readable PyTorch checkpoint ({_one_line(exc)})") from None
    state = unwrap_state_dict(obj, str(path))
    return Checkpoint(tensors=state, metadata={}, digest=_sha256_file(path), source=str(path),
                      nbytes=path.stat().st_size)


def unwrap_state_dict(obj: Any, name: str) -> dict[str, torch.Tensor]:
    """The state dict inside a training checkpoint, with wrapper prefixes removed."""
    while isinstance(obj, Mapping):
        inner = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, Mapping):
        raise LgError(f"{name}: expected a state dict (a mapping of names to tensors), found {type(obj).__name__}")
    out: dict[str, torch.Tensor] = {}
    for key, value in obj.items():
        if not isinstance(value, torch.Tensor):
            raise LgError(f"{name}: entry {key!r} is a {type(value).__name__}, not a tensor")
        clean = str(key)
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if clean.startswith(prefix):
                    clean, stripped = clean[len(prefix):], True
        out[clean] = value
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# ---------------------------------------------------------------- writing

def check_output(destination: str | os.PathLike, *, force: bool,
                 inputs: tuple[str | os.PathLike, ...] = ()) -> None:
    """Refuse an output that exists (without force), is an input, or cannot be written.

    Called before any work, so a bad output path fails fast; write_checkpoint
    checks again.
    """
    dst = str(destination)
    if dst == STDIO:
        return
    path = Path(dst)
    for src in inputs:
        if str(src) != STDIO and path.exists() and Path(src).exists() and path.samefile(src):
            raise LgError(f"{dst}: the output is an input; lg never modifies its inputs")
    if path.is_dir():
        raise LgError(f"{dst}: is a folder; give a file name for the output")
    if path.exists() and not force:
        raise LgError(f"{dst}: exists; pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise LgError(f"{dst}: folder {parent} does not exist")


def write_checkpoint(destination: str | os.PathLike, tensors: Mapping[str, torch.Tensor],
                     metadata: Mapping[str, str], *, force: bool = False,
                     stdout: BinaryIO | None = None) -> str:
    """Write tensors and metadata as safetensors; returns the written bytes' sha256.

    The file is streamed tensor by tensor from the tensors' own memory (views
    of one storage are fine), hashed on the way in a second thread: no copy
    of the whole model is made.
    """
    dst = str(destination)
    meta = {"format": "pt", **dict(metadata)}
    header, ordered = _layout(tensors, meta)
    if dst == STDIO:
        stream = stdout if stdout is not None else sys.stdout.buffer
        digest = _stream_safetensors(stream, header, ordered)
        stream.flush()
        return digest
    check_output(dst, force=force)
    path = Path(dst)
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        digest = _stream_safetensors(stream, header, ordered)
        if path.exists() and not force:  # appeared while we worked
            raise LgError(f"{dst}: exists; pass --force to overwrite it")
    return digest


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed over `path` when the
    block succeeds, removed when it fails, so nothing half-written is left.
    The file gets the mode a plain open() would give (mkstemp's is 0600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix,
                               dir=path.parent if str(path.parent) else ".")
    os.fchmod(fd, 0o666 & ~_current_umask())
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _layout(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]):
    """The safetensors header and the tensors in file order.

    Largest element size first, as safetensors does, so every tensor's offset
    is a multiple of its element size (readers can map it without copying).
    """
    for key, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise LgError(f"cannot write {key!r}: a {type(tensor).__name__}, not a tensor")
        if tensor.dtype not in DTYPE_NAMES:
            raise LgError(f"cannot write {key!r}: dtype {tensor.dtype} has no safetensors name")
    ordered = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for key, tensor in ordered:
        nbytes = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    return header, ordered


def _stream_safetensors(stream: BinaryIO, header: Mapping[str, Any],
                        ordered: Iterable[tuple[str, torch.Tensor]]) -> str:
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes
    digest = hashlib.sha256()
    prefix = struct.pack("<Q", len(encoded)) + encoded
    stream.write(prefix)
    digest.update(prefix)
    pending: Future | None = None
    for _, tensor in ordered:
        data = _raw_bytes(tensor)
        if pending is not None:
            pending.result()  # the digest must see the chunks in file order
        pending = _HASHER.submit(digest.update, data)
        stream.write(data)
    if pending is not None:
        pending.result()
    return digest.hexdigest()


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes in native (little-endian) order, without a copy when
    it is already contiguous on the CPU."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy())


def read_bytes(data: bytes) -> Checkpoint:
    """Parse safetensors bytes held in memory (tests, notebooks)."""
    return _read_safetensors_bytes(data, STDIO)


__all__ = ["Checkpoint", "read_checkpoint", "write_checkpoint", "check_output",
           "provenance_metadata", "provenance_chain", "decode_lg_metadata", "encode_lg_metadata",
           "unwrap_state_dict", "read_bytes", "STDIO"]
