"""Atomic outputs: a temporary file or folder beside the output, renamed
into place when complete and removed when not, so that nothing
half-written is left behind; a signal that arrives while an output is put
in place waits until it is (`raise_or_defer`)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import LgError, check_interrupted, os_reason, shown


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, output: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed over `path` when the
    block succeeds, removed when it fails, so nothing half-written is left.
    The file gets the mode a plain open() would give (mkstemp's is 0600).
    `output`: the command's output (a signal after its rename is said to
    have come after it was written)."""
    path = Path(path)
    suffix = ".tmp" + path.suffix
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path.name, suffix), suffix=suffix,
                                   dir=path.parent if str(path.parent) else ".")
    except OSError as exc:  # named by the output, not by the temporary file never made
        raise LgError(f"{shown(path)}: cannot be written ({os_reason(exc)})") from None
    os.fchmod(fd, 0o666 & ~_current_umask())
    os.close(fd)
    try:
        yield Path(tmp)
        _put_in_place(Path(tmp), path, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_folder(path: Path, *, force: bool, output: bool = False) -> Iterator[Path]:
    """A temporary folder beside `path` to write a sharded checkpoint into;
    it replaces `path` when the block succeeds (an existing checkpoint folder
    or file only with `force`; an empty folder whatever `force` says, and
    only while it is empty: one written into meanwhile is refused, never
    deleted) and is removed when it fails."""
    parent = path.parent if str(path.parent) else Path(".")
    was_empty = is_empty_folder(path)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path.name, ".tmp"), suffix=".tmp", dir=parent))
    except OSError as exc:
        raise LgError(f"{shown(path)}: cannot be written ({os_reason(exc)})") from None
    os.chmod(tmp, 0o777 & ~_current_umask())
    try:
        yield tmp
        if was_empty and os.path.lexists(path) and not is_empty_folder(path):  # written into while we worked
            raise LgError(no_longer_empty(path))
        if os.path.lexists(path) and not force and not is_empty_folder(path):  # appeared while we worked
            raise LgError(f"{shown(path)}: exists; pass --force to overwrite it")
        _put_in_place(tmp, path, output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def no_longer_empty(path: Path) -> str:
    """The refusal of an empty output folder that something else wrote into while lg worked."""
    return (f"{shown(path)}: the output folder, empty when lg began, now holds files: nothing written (lg never "
            f"deletes what it did not write)")


def is_empty_folder(path: Path) -> bool:
    """A folder (not a link to one) that holds nothing."""
    try:
        return path.is_dir() and not path.is_symlink() and not os.listdir(path)
    except OSError:
        return False


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
    place, but an empty folder is renamed over (it keeps its mode; the
    rename fails, and nothing is lost, if it is no longer empty). Signals
    wait until the output is in place."""
    # A signal received before this point (its exception swallowed by a
    # library on the way) stops the output from being put in place at all.
    check_interrupted()
    trash = None
    try:
        with _signals_held():
            if tmp.is_dir() and is_empty_folder(path):
                _replace_empty_folder(tmp, path)
            else:
                replacing = os.path.lexists(path) and (tmp.is_dir() or (path.is_dir() and not path.is_symlink()))
                trash = _move_aside(path) if replacing else None
                os.replace(tmp, path)
            if output:
                committed_outputs.append(str(path))
    finally:  # the old output, moved aside, goes even when a waiting signal is raised now
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)


def _replace_empty_folder(tmp: Path, path: Path) -> None:
    """Rename the folder `tmp` over the empty folder `path`: rename(2) does
    so in one step and refuses a folder that is not empty, so a file written
    into it meanwhile is never lost."""
    try:
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise LgError(no_longer_empty(path)) from None
        raise LgError(f"{shown(path)}: cannot be written ({os_reason(exc)})") from None


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


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
