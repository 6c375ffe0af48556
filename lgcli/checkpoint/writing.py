"""Writing safetensors: streamed tensor by tensor from the tensors' own
memory and hashed on the way, as one file, a folder of shards with their
index, or a Hugging Face model folder; into a temporary name first
(`atomic`), read back, then renamed into place."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping

from ..errors import LgError, ReaderGone, shown
from ..header import MAX_HEADER_BYTES, check_data_size, header_length, parse_header, valid_unicode
from ..lazy import torch
from .atomic import atomic_folder, atomic_path
from .companions import CompanionFile, companion_size
from .destination import check_form, check_output
from .hashing import _HASHER, _sha256_file
from .loaded import dtype_names
from .memory import memory_text
from .names import README_NAME, SAFETENSORS_INDEX, STDIO, WEIGHTS_NAME


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

Entry = tuple[str, "torch.dtype", tuple[int, ...]]


def write_tensors(destination: str | os.PathLike, entries: list[Entry],
                  tensors: Iterable[tuple[str, torch.Tensor]], metadata: Mapping[str, str], *,
                  force: bool = False, stdout: BinaryIO | None = None, shard_size: int | None = None,
                  final_metadata: Callable[[], Mapping[str, str]] | None = None,
                  folder_files: Mapping[str, "bytes | CompanionFile"] | None = None,
                  readme: Callable[[Mapping[str, str]], bytes] | None = None) -> str:
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

    `readme(metadata)`, when given, is the model card of a folder output (a
    model folder, or shards), written into it as README.md before it is put
    in place; a single file or a stream has none.
    """
    dst = str(destination)
    as_folder = folder_files is not None and dst != STDIO
    shards = [entries] if dst == STDIO else shard_parts(entries, shard_size)
    total = sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in entries)
    # The form the name says, against the form written: shards are a folder
    # (`-o DIR/` names it), one file takes a file name.
    check_form(dst, folder=as_folder, shards=len(shards), shard_size=shard_size,
               weight_bytes=total if len(entries) > 1 else None)
    if final_metadata is not None and (dst == STDIO or len(shards) > 1 or as_folder):
        metadata, final_metadata = final_metadata(), None
    meta = {"format": "pt", **dict(metadata)}
    _check_names({key: None for key, _, _ in entries})
    stream_of = _checked_stream(entries, tensors)
    if dst == STDIO:
        header, encoded = _header(entries, meta)
        stream = stdout if stdout is not None else sys.stdout.buffer
        try:
            digest = _stream_safetensors(stream, encoded, stream_of(len(entries)))
            stream.flush()
        except BrokenPipeError as exc:
            raise ReaderGone("stdout's reader went away before the checkpoint was written in full") from exc
        return digest
    check_output(dst, force=force)  # its form: checked above
    path = Path(dst.rstrip("/" + os.sep) or dst)
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
            _write_readme(tmp, readme, meta)
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
        digest = _write_shards(tmp, shards, meta, stream_of, dst)
        _write_readme(tmp, readme, meta)
        return digest


def _write_readme(folder: Path, readme: Callable[[Mapping[str, str]], bytes] | None,
                  meta: Mapping[str, str]) -> None:
    if readme is not None:
        (folder / README_NAME).write_bytes(readme(meta))


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


def shard_parts(entries: list[Entry], shard_size: int | None) -> list[list[Entry]]:
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
        if tensor is not None and tensor.dtype not in dtype_names():
            raise LgError(f"cannot write {key!r}: dtype {tensor.dtype} has no safetensors name")


def _check_disk(path: Path, nbytes: int) -> None:
    try:
        free = shutil.disk_usage(path.parent if str(path.parent) else ".").free
    except OSError:
        return
    if nbytes > free:
        raise LgError(f"{shown(path)}: the output needs {memory_text(nbytes)} and its disk has "
                      f"{memory_text(free)} free")


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
        header[key] = {"dtype": dtype_names()[dtype], "shape": list(shape),
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
