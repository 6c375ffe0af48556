"""The one exception type users see, and the default way library code speaks to them."""

from __future__ import annotations

import contextlib
import signal
import threading
import unicodedata
from typing import Iterator


class LgError(Exception):
    """A problem with the user's input or request.

    The message is one line that says what was expected and what was found;
    the CLI prints it as ``lg: error: <message>`` and exits non-zero (2 for a
    usage error, 1 otherwise), with no traceback unless ``--debug``.
    """


class Interrupted(BaseException):
    """A signal (SIGINT, SIGTERM, SIGHUP) raised where lg is, so that
    `finally` blocks clean up. Not an Exception (no `except Exception`
    swallows it) nor a KeyboardInterrupt (click would print a blank line and
    abort silently)."""


# The interrupting signals this process received while lg ran, in order
# (the `lg` command's handlers record them).
received_signals: list[int] = []


# The signals that interrupt lg (the `lg` command's handlers take them).
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """The interrupting signals kept pending (blocked, not lost) while a
    library with C extensions is imported, and delivered when it is done.
    lg's handler raises where Python is; inside torch's import that can be
    Python code that torch's C++ called, where an exception aborts the
    process ("terminate called after throwing ... Interrupted"), or an
    import left half done that a later import of torch cannot redo
    ("cannot load module more than once per process"). The mask is the
    calling thread's: only the main thread runs lg's handlers."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a pending signal is handled from here


def check_interrupted() -> None:
    """Raise `Interrupted` again for a signal received earlier, in case a
    library swallowed the exception lg's handler raised: torch's import
    catches whatever its own import of numpy raises, so a Ctrl-C at that
    moment would otherwise be lost and the job run to its end. Called when
    a heavy library has been imported and before an output is put in place:
    an interrupt at any moment leaves the destination as it was."""
    if received_signals:
        raise Interrupted(received_signals[0])


class ReaderGone(Exception):
    """stdout's reader went away while a checkpoint was streamed to it
    (`lg shrink ... -o - | head -c 100`). Not an OSError: click turns every
    EPIPE it sees into exit status 1, where lg's `reader_gone` rule is 0, as
    for a table (`lg methods | head`); the command line exits 0 on it."""


class UsageError(LgError):
    """A malformed command line (a flag's value out of its range, flags that
    exclude each other): exit status 2, as the shell's tools do."""


class RefusedWithPipe(LgError):
    """A refusal whose remedy is a pipe of lg commands from the source to
    the output. Only the caller knows the paths and the flags the user gave
    about them, so `pipe` is a template: {src} and {out} stand for the
    paths, {given} for the source's flags (its heads, --allow-nonfinite) and
    {written} for the output's (--force, --shard-size, --card). Shown as is,
    it reads SRC and OUT; `complete` fills in what the user typed, so the
    hint runs as printed (issue 32)."""

    def __init__(self, reason: str, pipe: str):
        super().__init__(reason + pipe.format(src="SRC", out="OUT", given="", written=""))
        self.reason, self.pipe = reason, pipe

    def complete(self, src: str, output: str, source_options: tuple[str, ...] = (),
                 output_options: tuple[str, ...] = ()) -> str:
        return self.reason + self.pipe.format(src=_shell_quote(src), out=_shell_quote(output),
                                              given="".join(f" {flag}" for flag in source_options),
                                              written="".join(f" {flag}" for flag in output_options))


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def shown(text: object) -> str:
    """A user-given string (file name, key, flag value) as it should appear in
    a message: as is when it is printable, else quoted and escaped the way
    Python's repr does, so no input can start a second line or send control
    codes to the terminal."""
    text = str(text)
    if all(_printable(ch) for ch in text):
        return text
    return repr(text)


def counted(count: int, noun: str) -> str:
    """"1 head", "6 heads", "2 classes": a count and its noun, singular for one."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def one_line(message: str) -> str:
    """The message with every non-printable character escaped: what the CLI
    prints can never be more than one line, whatever a message embeds."""
    if all(_printable(ch) for ch in message):
        return message
    return "".join(ch if _printable(ch) else repr(ch)[1:-1] for ch in message)


def _printable(ch: str) -> bool:
    # Control, format, surrogate, unassigned and private-use characters (C*),
    # and the line/paragraph separators (Zl, Zp), are escaped.
    return ch == " " or not unicodedata.category(ch).startswith(("C", "Z"))


def os_reason(exc: OSError) -> str:
    """An operating-system error's reason, in words (no errno names)."""
    import errno

    reasons = {errno.ENAMETOOLONG: "the file name is too long", errno.ELOOP: "a symbolic link loop",
               errno.EACCES: "permission denied", errno.EISDIR: "it is a folder, not a file",
               errno.ENOENT: "no such file or folder", errno.ENOTDIR: "a part of the path is not a folder",
               errno.ENOSPC: "no space left on the disk", errno.EROFS: "the file system is read-only"}
    return reasons.get(exc.errno, (exc.strerror or "an operating-system error").lower())


def notify_stderr(message: str) -> None:
    """The default `notify` of library functions: one line on stderr, prefixed
    ``lg:`` (the CLI passes its own, rich, console)."""
    import sys

    print(f"lg: {one_line(message)}", file=sys.stderr)


def debugging() -> bool:
    """Whether LG_DEBUG asks for debugging (`--debug` sets it): any value but
    empty, 0, false, no or off."""
    import os

    return os.environ.get("LG_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")
