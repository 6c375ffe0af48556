"""The one exception type users see."""


class LgError(Exception):
    """A problem with the user's input or request.

    The message is one line that says what was expected and what was found;
    the CLI prints it as ``lg: error: <message>`` and exits non-zero, with no
    traceback unless ``--debug``.
    """
