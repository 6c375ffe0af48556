"""The `lg` command line: a thin skin over `lgcli`'s functions.

Conventions every command keeps: stdout carries data (a checkpoint written to
'-', a table, or the --json report) and nothing else; messages and progress
go to stderr; bad input is one line `lg: error: ...` and exit status 1 (2 for
a usage error), with the traceback only under --debug; third-party warnings
are silenced unless --debug.

Start-up stays light: nothing imports torch before a tensor is made
(`lgcli.lazy`), so help, usage errors and errors about a path answer at once.
The app is built per invocation (`build_app`), and only a command that takes
the methods' or learngene kinds' declared flags (shrink, grow, condense)
imports their registries to build those flags; every command imports what
it runs. Help names values as a user writes them (`LgCommand`).

The commands themselves live in `lgcli.commands`, one module per group
(inspect and methods, shrink and grow, condense and distill, eval and
bench); this module builds the app from them and runs it: errors, signals
and the exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import warnings
from typing import Any, Optional

import typer

from . import __version__
from .commands.common import LgCommand, LgGroup, invocation, resume_hints, writes_parts
from .commands.inspecting import inspect, methods_command, render_inspect
from .commands.resizing import RESIZE_SUMMARIES, register_resize
from .commands.scoring import bench_command, eval_command
from .commands.training import distill_command, register_condense
from .checkpoint.memory import out_of_memory
from .errors import (INTERRUPTS, Interrupted, LgError, ReaderGone, UsageError, debugging, one_line, os_reason,
                     received_signals, shown)

# typer ships its own copy of click: its exceptions are the ones raised, so
# they are found through typer rather than imported from click.
_click_errors = sys.modules[typer.BadParameter.__module__]
# Commands whose flags include those the methods and learngene kinds declare.
DECLARING_COMMANDS = ("shrink", "grow", "condense")

__all__ = ["build_app", "interrupted_message", "main", "render_inspect"]


def build_app(command: Optional[str] = None) -> typer.Typer:
    """The `lg` app. `command` is the subcommand about to run: only when it
    is one of DECLARING_COMMANDS are the declarations imported to build its
    flags (those of its direction's methods, for shrink and grow); the others
    appear in the root help by name."""
    app = typer.Typer(
        name="lg",
        cls=LgGroup,
        help="Resize transformer checkpoints, and grow learngenes into models of any depth and width.",
        # `lg --install-completion` / `--show-completion`: bash, zsh, fish, PowerShell.
        add_completion=True,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        # Markdown: help panels per method (rich), and help text shown as written.
        rich_markup_mode="markdown",
        # Subcommands inherit it: `lg shrink -h` as `lg shrink --help`.
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    app.command(cls=LgCommand)(inspect)
    app.command("eval", cls=LgCommand)(eval_command)
    app.command("bench", cls=LgCommand)(bench_command)
    app.command("methods", cls=LgCommand)(methods_command)
    for direction in RESIZE_SUMMARIES:
        register_resize(app, direction, declared=command == direction)
    register_condense(app, declared=command == "condense")
    app.command("distill", cls=LgCommand)(distill_command)
    return app


def _version_callback(value: bool) -> None:
    if value:
        print(f"lg {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """lg: learngene tools for timm ViTs. Add --debug anywhere for tracebacks."""


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: run the app, turning errors into one line on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None:  # started with stdout closed (`lg ... >&-`): say so where lg would write
        sys.stdout = _ClosedStdout()
    debug = "--debug" in args or debugging()
    args = [a for a in args if a != "--debug"]
    invocation[:] = args
    resume_hints.clear()
    writes_parts.clear()
    if debug:  # the library's own quieting (transformers' log) reads it
        os.environ["LG_DEBUG"] = "1"
    command = next((a for a in args or _completion_words() if not a.startswith("-")), None)
    with warnings.catch_warnings():
        if not debug:
            # Library warnings (torch, timm, PIL) are not the user's to read;
            # what matters is turned into lg's own words where it arises.
            warnings.simplefilter("ignore")
        # Large CPU tensors (role stacks) on transparent huge pages: fewer page
        # faults when a stack is allocated and filled (about 10 % of a resize
        # of a 1.2 GB checkpoint). torch reads this when it first allocates.
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
        # Ctrl-C, SIGTERM (a job killed, a CI timeout) and SIGHUP (a closed
        # terminal or ssh session) unwind lg, so that an output being written
        # is removed rather than left half-written; the first one raises,
        # later ones wait, so that the clean-up they would cut short runs.
        previous = {sig: signal.signal(sig, _on_signal) for sig in INTERRUPTS}
        try:
            result = _run(args, command, debug)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if _signalled:  # a signal that came as lg was returning
        _fail(interrupted_message(), 128 + _signalled[0])
    if isinstance(result, int) and result:
        sys.exit(result)




def _completion_words() -> list[str]:
    """The words after `lg` on the line the shell completes (the script
    `lg --install-completion` installs runs lg with them in the
    environment): the subcommand among them decides which declared flags
    are offered."""
    if not os.environ.get("_LG_COMPLETE"):
        return []
    typed = os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS", "")
    return typed.split()[1:]


class _ClosedStdout:
    """Stands for a closed stdout: whatever lg would print there (a report,
    `-o -`'s checkpoint) is refused in one line instead of failing inside."""

    def _closed(self, *args: Any, **kwargs: Any) -> Any:
        raise LgError("stdout is closed: lg writes its report (and -o -, the checkpoint) there")

    write = fileno = _closed
    buffer = property(_closed)

    def flush(self) -> None:  # nothing was written; the interpreter flushes at exit
        return None

    def isatty(self) -> bool:
        return False


# The signals received (lgcli.errors: kept there, where the writer checks them too).
_signalled = received_signals


def _on_signal(signum: int, frame: Any) -> None:
    _signalled.append(signum)
    if len(_signalled) > 1:
        return
    atomic = sys.modules.get("lgcli.checkpoint.atomic")  # not imported yet: nothing is being written
    if atomic is None:
        raise Interrupted(signum)
    atomic.raise_or_defer(Interrupted(signum))  # after the rename, if an output is being put in place


def interrupted_message() -> str:
    """The one line an interrupted run ends with: what was written, if anything."""
    atomic = sys.modules.get("lgcli.checkpoint.atomic")  # not imported: nothing was written
    committed_outputs = atomic.committed_outputs if atomic is not None else []
    name = signal.Signals(_signalled[0]).name
    if committed_outputs and not writes_parts:  # the signal came after the output was renamed into place
        return f"interrupted ({name}) after {shown(committed_outputs[-1])} was written in full"
    return f"interrupted ({name}); nothing written" + "".join(hint() for hint in resume_hints)


def _run(args: list[str], command: Optional[str], debug: bool) -> Any:
    app = None
    try:
        app = build_app(command)
        if not args and not os.environ.get("_LG_COMPLETE"):
            # Bare `lg`: the help and exit status 2, with no error line, as
            # typer's no_args_is_help does under click 8.2 and later (git too
            # prints its usage and fails): no command is a usage mistake, and
            # a script whose command word came out empty must not pass. The
            # help goes to stderr (click's NoArgsIsHelpError shows it there),
            # so that stdout carries data only: `lg $cmd > out` writes no help
            # into out. (Run here, click would raise that error with the help
            # already printed to stdout and an empty message.)
            with contextlib.redirect_stdout(sys.stderr):
                app(args=["--help"], prog_name="lg", standalone_mode=False)
            return 2
        return app(args=args, prog_name="lg", standalone_mode=False)
    except UsageError as exc:
        if debug:
            raise
        _fail(str(exc), 2)
    except LgError as exc:
        if debug:
            raise
        _fail(str(exc), 1)
    except typer.Abort:
        if _signalled:
            _fail(interrupted_message(), 128 + _signalled[0])
        _fail("aborted", 130)
    except _click_errors.ClickException as exc:
        if debug:
            raise
        hint = ""
        if isinstance(exc, _click_errors.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        # Usage errors exit 2, as click itself (and the shell's tools) do.
        _fail(exc.format_message() + hint, exc.exit_code)
    except (BrokenPipeError, ReaderGone):
        # The reader went away (e.g. `lg inspect f | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Interrupted:
        _fail(interrupted_message(), 128 + _signalled[0])
    except KeyboardInterrupt:  # raised before lg's handler was in place, or by a library
        _fail("interrupted; nothing written", 130)
    except OSError as exc:  # a file lg was asked to read or write, refused by the system
        if debug:
            raise
        if out_of_memory(exc) is not None:  # ENOMEM: a fork or a mapping the system refused
            _fail(out_of_memory_message(exc, _batch_options(app, command)), 1)
        where = f"{shown(exc.filename)}: " if exc.filename else ""
        _fail(f"{where}{os_reason(exc)}", 1)
    except Exception as exc:  # a bug, or an input we did not foresee
        if debug:
            raise
        if out_of_memory(exc) is not None:
            _fail(out_of_memory_message(exc, _batch_options(app, command)), 1)
        if line := missing_dependency(exc) or unloadable_library(exc):
            _fail(line, 1)
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _fail(f"internal error: this is a bug in lg; please report it with the --debug output "
              f"({type(exc).__name__}{': ' + detail if detail else ''})", 1)
    return None


# The pip name of a module whose distribution is named otherwise (pyproject.toml's dependencies).
PIP_NAMES = {"pywt": "PyWavelets", "yaml": "PyYAML", "PIL": "pillow"}


def missing_dependency(exc: BaseException) -> str | None:
    """The line for an installation that lacks a package lg imports (a
    dependency pip did not install, or one removed since), with the pip
    command that installs it; None for anything else, lg's own modules
    included (a missing one of those is a bug)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top == "lgcli":
        return None
    return (f"the Python package {top!r} is not installed here, and lg needs it for this "
            f"(pip install {PIP_NAMES.get(top, top)})")


# What the dynamic loader says when the system will not map a shared
# library (torch's are gigabytes of address space) into the process.
_UNMAPPABLE = ("failed to map segment from shared object", "cannot allocate memory")


def unloadable_library(exc: BaseException) -> str | None:
    """The line for a library the system would not load into memory (an
    address-space limit such as `ulimit -v` below what torch maps); None
    for anything else."""
    if not isinstance(exc, ImportError) or isinstance(exc, ModuleNotFoundError):
        return None
    message = str(exc).strip()
    if not any(words in message.lower() for words in _UNMAPPABLE):
        return None
    library, _, why = message.partition(":")
    return (f"out of memory: the system would not load {library} into this process ({why.strip()}); "
            f"raise its memory limit (ulimit -v, the container's) or free memory")


def out_of_memory_message(exc: BaseException, batch_options: tuple[str, ...] = ()) -> str:
    """The one line for running out of memory: what was asked, and what to
    lower: the command's own batch-size options when it has them."""
    asked = out_of_memory(exc) or "the request needs more memory than this machine has free"
    if batch_options:
        return f"out of memory: {asked}; try a smaller {' or '.join(batch_options)}"
    return f"out of memory: {asked}; ask for less (a smaller size, fewer examples), or use a machine with more memory"


def _batch_options(app: Any, command: Optional[str]) -> tuple[str, ...]:
    """The batch-size options (--batch-size, --condense-batch-size) of the
    subcommand that ran, as its help names them; () when it has none."""
    try:
        group = typer.main.get_command(app)
        params = group.commands[command].params  # type: ignore[attr-defined]
    except Exception:  # no app (it failed to build) or no such command
        return ()
    return tuple(name for param in params for name in getattr(param, "opts", ())
                 if name.startswith("--") and name.endswith("batch-size"))


def _fail(message: str, code: int) -> None:
    sys.stderr.write(f"lg: error: {one_line(message)}\n")
    sys.stderr.flush()
    sys.exit(code)
