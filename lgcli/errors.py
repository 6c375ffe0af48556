"""The one exception type users see, and the default way library code speaks to them."""


class LgError(Exception):
    """A problem with the user's input or request.

    The message is one line that says what was expected and what was found;
    the CLI prints it as ``lg: error: <message>`` and exits non-zero, with no
    traceback unless ``--debug``.
    """


def notify_stderr(message: str) -> None:
    """The default `notify` of library functions: one line on stderr, prefixed
    ``lg:`` (the CLI passes its own, rich, console)."""
    import sys

    print(f"lg: {message}", file=sys.stderr)
