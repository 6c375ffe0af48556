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
- ``lg.version``

Writes are atomic (a temporary file in the destination folder, then a
rename), an existing output is refused without ``force``, and an input is
never opened for writing.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Mapping

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as safetensors_load_bytes
from safetensors.torch import save as safetensors_save_bytes
from safetensors.torch import save_file as safetensors_save_file

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
JSON_KEYS = ("config", "options", "source")


@dataclass
class Checkpoint:
    """Tensors and metadata read from one source."""

    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str] = field(default_factory=dict)
    sha256: str = ""
    source: str = STDIO
    nbytes: int = 0

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
                        source: Checkpoint | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a file lg writes, chained to its source."""
    lg: dict[str, Any] = {"kind": kind, "family": family, "config": dict(config),
                          "method": method, "options": dict(options) if options else None,
                          "version": __version__}
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
                      sha256=hashlib.sha256(data).hexdigest(), source=name, nbytes=len(data))


def _read_safetensors_file(path: Path) -> Checkpoint:
    total = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) == 8:
            (length,) = struct.unpack("<Q", prefix)
            prefix += f.read(min(length, MAX_HEADER_BYTES + 1))
    header = _parse_header(prefix, total, str(path))
    _check_offsets(header, total - 8 - struct.unpack("<Q", prefix[:8])[0], str(path))
    tensors: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise LgError(f"{path}: corrupt safetensors file ({_one_line(exc)})") from None
    return Checkpoint(tensors=tensors, metadata=dict(header.get("__metadata__", {}) or {}),
                      sha256=_sha256_file(path), source=str(path), nbytes=total)


def _check_offsets(header: Mapping[str, Any], data_bytes: int, name: str) -> None:
    """Refuse tensors whose byte ranges fall outside the file (truncation)."""
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise LgError(f"{name}: corrupt safetensors header (entry {key!r} has no data_offsets)") from None
        if not (0 <= begin <= end <= data_bytes):
            raise LgError(f"{name}: truncated or corrupt (tensor {key!r} needs bytes {begin}..{end}, "
                          f"the file holds {data_bytes})")


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
    return Checkpoint(tensors=tensors, metadata=metadata, sha256=digest.hexdigest(),
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
    return Checkpoint(tensors=state, metadata={}, sha256=_sha256_file(path), source=str(path),
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
    """Write tensors and metadata as safetensors; returns the file's sha256."""
    dst = str(destination)
    clean = _independent_tensors(tensors)
    meta = {"format": "pt", **dict(metadata)}
    if dst == STDIO:
        data = safetensors_save_bytes(clean, metadata=meta)
        stream = stdout if stdout is not None else sys.stdout.buffer
        stream.write(data)
        stream.flush()
        return hashlib.sha256(data).hexdigest()
    check_output(dst, force=force)
    path = Path(dst)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    os.close(fd)
    try:
        safetensors_save_file(clean, tmp, metadata=meta)
        if path.exists() and not force:  # appeared while we worked
            raise LgError(f"{dst}: exists; pass --force to overwrite it")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return _sha256_file(path)


def _independent_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous tensors that share no storage (safetensors refuses aliasing)."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        t = tensor.detach().cpu()
        ptr = t.untyped_storage().data_ptr()
        if not t.is_contiguous() or ptr in seen or t.storage_offset() != 0 or \
                t.untyped_storage().nbytes() != t.numel() * t.element_size():
            t = t.contiguous().clone()
        seen.add(t.untyped_storage().data_ptr())
        out[key] = t
    return out


def save_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """Serialise to safetensors bytes in memory (tests, notebooks)."""
    return safetensors_save_bytes(_independent_tensors(tensors), metadata={"format": "pt", **dict(metadata)})


def read_bytes(data: bytes) -> Checkpoint:
    """Parse safetensors bytes held in memory (tests, notebooks)."""
    return _read_safetensors_bytes(data, STDIO)


__all__ = ["Checkpoint", "read_checkpoint", "write_checkpoint", "check_output",
           "provenance_metadata", "provenance_chain", "decode_lg_metadata", "encode_lg_metadata",
           "unwrap_state_dict", "save_bytes", "read_bytes", "STDIO"]
