"""Reading a checkpoint: a safetensors file (its header read, its tensors
read when asked for), stdin or a pipe (a bounded stream), a Hugging Face
model folder, a folder of shards with their index, or a legacy pickle."""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from ..errors import LgError, os_reason, shown
from ..header import MAX_HEADER_BYTES, Header, HeaderTensor, check_data_size, header_length, load_json, parse_header
from ..hub import resolve_source, snapshot_blobs
from ..lazy import torch
from .companions import companions_from_metadata, folder_companions
from .hashing import _hash_in_background
from .loaded import Checkpoint, torch_dtypes
from .memory import check_memory
from .names import (CONFIG_NAME, PICKLE_SUFFIXES, PICKLED_WEIGHTS_NAME, SAFETENSORS_INDEX, STDIO, WEIGHTS_NAME,
                    not_a_model_folder)
from .pickles import _read_pickle

# Streams are read in chunks of this size (a pipe gives what it has).
STREAM_CHUNK = 1 << 24
MAX_CONFIG_BYTES = 1 << 24


def read_checkpoint(source: str | os.PathLike, *, stdin: BinaryIO | None = None,
                    header_only: bool = False) -> Checkpoint:
    """Read a checkpoint from a path, a sharded folder, a pipe, or '-' (stdin).

    A regular file's header is read and its tensors are read when asked for
    (`Checkpoint.read_into`, or views of a private map); stdin, a named pipe and a process
    substitution (``<(...)``) are read as a stream, up to the size their
    header states (see `read_stream`). A hub id (`org/name[@revision]`) is
    read from the local Hugging Face cache (`lgcli.hub.resolve_source`).

    `header_only` (what `lg inspect` reads): a safetensors file's, folder's
    or shards' tensors are `HeaderTensor`s, their values unread and torch not
    imported; `read_into` still reads their values. Streams and pickles are
    read whole either way."""
    if not isinstance(source, (str, os.PathLike)):  # str() of a live model is its repr: not a path to look for
        raise TypeError(f"a checkpoint is read from a path, '-' or a hub id, not a {type(source).__name__}: for a "
                        f"live model, lgcli.spec_of_model(model) gives its (spec, stack), or write it with "
                        f"lgcli.save_model(model, path)")
    src = resolve_source(str(source))
    if src == STDIO:
        stream = stdin if stdin is not None else _stdin_buffer()
        return read_stream(stream, STDIO)
    mode = _stat(src).st_mode
    try:
        if stat.S_ISDIR(mode):
            return _read_folder(Path(src), header_only)
        if not stat.S_ISREG(mode):  # a FIFO, a pipe from <(...), a character device
            with open(src, "rb", buffering=0) as stream:
                return read_stream(stream, src)
        path = Path(src)
        if path.suffix in PICKLE_SUFFIXES and not _looks_like_safetensors(path):
            return _read_pickle(path)
        return _read_safetensors_file(path, header_only)
    except OSError as exc:
        raise LgError(f"{shown(src)}: cannot read it ({os_reason(exc)})") from None


def check_source(source: str | os.PathLike) -> None:
    """Refuse a source that names nothing (no such file or folder, a hub
    id not in the cache) as `read_checkpoint` would, before a command pays
    for torch or a device: a mistyped path is said at once."""
    src = resolve_source(str(source))
    if src != STDIO:
        _stat(src)


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


def _read_safetensors_file(path: Path, header_only: bool = False) -> Checkpoint:
    """A file's tensors, two ways: `read_into` reads a tensor's bytes with
    pread into the caller's buffer (how lazy stacks read: one copy, nothing
    mapped into this process), and `tensors` are zero-copy views of a private
    memory map, for code that wants whole tensors (inspect, learngenes,
    training checkpoints), or with `header_only` `HeaderTensor`s.

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
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if total and not header_only else None
    except BaseException:
        f.close()
        raise
    checkpoint = _checkpoint_from_buffer(header, mapped, header.data_start, str(path),
                                         _hash_in_background(f), total, header_only)
    checkpoint.mapping = mapped
    checkpoint.locations = {entry.name: (f, header.data_start + entry.begin) for entry in header.entries}
    return checkpoint


def _checkpoint_from_buffer(header: Header, buffer, data_start: int, name: str, digest, nbytes: int,
                            header_only: bool = False) -> Checkpoint:
    if header_only:
        tensors = {entry.name: HeaderTensor(entry.dtype, entry.shape) for entry in header.entries}
    else:
        tensors = {entry.name: _tensor_from_buffer(buffer, torch_dtypes()[entry.dtype], list(entry.shape),
                                                   data_start + entry.begin, entry.nbytes)
                   for entry in header.entries}
    return Checkpoint(tensors=tensors, metadata=header.metadata, digest=digest, source=name, nbytes=nbytes,
                      companions=companions_from_metadata(header.metadata, name), header_only=header_only)


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


def _regular_file(path: Path, what: str) -> None:
    """Shards and index files must be regular files: opening a FIFO would block."""
    mode = _stat(str(path)).st_mode
    if not stat.S_ISREG(mode):
        raise LgError(f"{shown(path)}: {what} must be a regular file")


def _read_folder(folder: Path, header_only: bool = False) -> Checkpoint:
    """A Hugging Face model folder (config.json and its weights), or a
    folder of shards with their index."""
    config_path = folder / CONFIG_NAME
    problem = not_a_model_folder(folder)
    if problem:
        raise LgError(problem)
    if not os.path.lexists(config_path):
        return _read_sharded(folder, header_only)
    _regular_file(config_path, "a model's config")
    if config_path.stat().st_size > MAX_CONFIG_BYTES:
        raise LgError(f"{shown(config_path)}: over {MAX_CONFIG_BYTES} bytes: not a model config")
    config = load_json(config_path.read_bytes(), f"{shown(config_path)}: not a model config (the file")
    if not isinstance(config, dict):
        raise LgError(f"{shown(config_path)}: a model config must be a JSON object")
    if os.path.lexists(folder / SAFETENSORS_INDEX):
        checkpoint = _read_sharded(folder, header_only)
    elif os.path.lexists(folder / WEIGHTS_NAME):
        _regular_file(folder / WEIGHTS_NAME, "a model's weights")
        checkpoint = _read_safetensors_file(folder / WEIGHTS_NAME, header_only)
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


def _read_sharded(folder: Path, header_only: bool = False) -> Checkpoint:
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
    tensors: dict[str, torch.Tensor | HeaderTensor] = {}
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
        part = _read_safetensors_file(shard_path, header_only)
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
                      source=str(folder), nbytes=nbytes, locations=locations, header_only=header_only)
