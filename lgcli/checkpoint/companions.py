"""Companion files: the tokenizer, generation config and
sentence-transformers modules beside a model's weights, which an output
folder copies unchanged. Each is opened once, by descriptor and without
following a link (O_NOFOLLOW), and its size is capped; a single file (a
pipe, a learngene) carries them in its metadata instead."""

from __future__ import annotations

import base64
import errno
import os
import re
import stat
from pathlib import Path
from typing import Iterator, Mapping

from ..errors import LgError, os_reason, shown
from ..hub import open_snapshot_link
from .names import STDIO, _source_label

COMPANION_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "tokenizer.model", "spiece.model",
                   "generation_config.json", "chat_template.jinja", "chat_template.json",
                   # an image model's preprocessing: its input size, mean and std do not change with depth or width
                   "preprocessor_config.json",
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
