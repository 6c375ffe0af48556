"""The `lg` command (`python -m lgcli`, and the `lg` script: pyproject's
entry point is `main` here).

An interrupt (SIGINT, SIGTERM, SIGHUP) is lg's from the first line lg runs
to the process's exit: while the command line's own modules are imported
(typer, rich: before `lgcli.cli.main` installs its handler), during the
command (`lgcli.cli.main`'s handler), and while the interpreter shuts
down (threads joined, atexit). Each ends in one line on stderr and exit
status 128 + the signal, never a traceback; only the interpreter's own
start, before any of lg's code runs, is out of reach.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

from .errors import INTERRUPTS


def main() -> None:
    from .errors import Interrupted, received_signals

    # Registered first, so run last of the exit functions (torch's and the
    # others' are registered later, when imported).
    atexit.register(_ignore_interrupts_from_here)

    def while_starting(signum: int, frame: object) -> None:
        received_signals.append(signum)
        if len(received_signals) == 1:  # a second one waits for the first's clean-up
            raise Interrupted(signum)

    for sig in INTERRUPTS:
        signal.signal(sig, while_starting)
    try:
        from .cli import main as run_command

        run_command()
    except Interrupted:  # before lgcli.cli's handler was installed, or just after it was removed
        _say_interrupted()
        sys.exit(128 + received_signals[0])
    finally:
        # From here on the interpreter shuts down: a signal now (a second
        # Ctrl-C) ends the process at once, without "Exception ignored in
        # threading/atexit" tracebacks.
        for sig in INTERRUPTS:
            signal.signal(sig, _while_exiting)


def _say_interrupted() -> None:
    cli = sys.modules.get("lgcli.cli")
    if cli is not None and hasattr(cli, "interrupted_message"):
        message = cli.interrupted_message()
    else:
        message = f"interrupted ({signal.Signals(_first_signal()).name}); nothing written"
    from .errors import one_line

    sys.stderr.write(f"lg: error: {one_line(message)}\n")
    sys.stderr.flush()


def _first_signal() -> int:
    from .errors import received_signals

    return received_signals[0]


def _while_exiting(signum: int, frame: object) -> None:
    from .errors import received_signals

    received_signals.append(signum)
    if len(received_signals) == 1:  # the first interrupt of the run: the command had finished
        sys.stderr.write(f"lg: error: interrupted ({signal.Signals(signum).name}) as lg was exiting\n")
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass
    os._exit(128 + received_signals[0])


def _ignore_interrupts_from_here() -> None:
    """The interpreter's last steps after the exit functions (its module
    teardown) put back the default action of a signal whose handler was
    Python's: a Ctrl-C there killed lg with status 130 and no word, after
    the command had finished and said so. Ignored from here: the command's
    own status stands. Until here, `_while_exiting` speaks for a signal."""
    for sig in INTERRUPTS:
        signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    main()
