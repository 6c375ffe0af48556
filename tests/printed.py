"""Run a command line lg printed (a hint, a load line's neighbour, a pipe) the
way a POSIX shell runs it, with each `lg` in this process.

A hint test used to hand the line to bash, which started a Python and
imported torch for every `lg` in it: a few seconds each, most of the time
those tests took. The lines lg prints use a small part of the shell's
language: words, quoted as `shlex.quote` quotes them, `lg` commands joined by
` | `, and a trailing `# comment`. This reads exactly that part by the shell's
rules and refuses anything else (an expansion, a redirection, a second
command), so a line that would do something else in bash fails here instead
of passing. tests/test_printed.py checks it against bash itself.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from conftest import Result, run_lg_inproc

# Outside quotes these are plain characters to bash; every other one is an
# operator, an expansion or a glob, which this reader does not run.
PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=,:+@%")
# Inside double quotes bash still expands these.
EXPANDED_IN_DOUBLE_QUOTES = frozenset("$`\\!")


class NotPlain(ValueError):
    """A line that uses more of the shell than lg's printed lines do."""


def pipeline(line: str) -> list[list[str]]:
    """The words of each command in `line`, split and unquoted as bash would."""
    stages, current, quote, word_start = [], [], None, True
    for index, char in enumerate(line):
        if quote == "'":  # everything up to the closing quote is literal
            quote = None if char == "'" else quote
        elif quote == '"':
            if char in EXPANDED_IN_DOUBLE_QUOTES:
                raise NotPlain(f"{char!r} inside double quotes is expanded by the shell: {line}")
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and word_start:  # a comment runs to the end of the line
            line = line[:index]
            break
        elif char == "|" and word_start and line[index + 1:index + 2] == " ":
            stages.append("".join(current))
            current = []
            word_start = True
            continue
        elif char not in PLAIN and char not in " #":  # inside a word, # is a plain character
            raise NotPlain(f"{char!r} at column {index + 1} is shell syntax lg's lines do not use: {line}")
        current.append(char)
        word_start = char == " "
    if quote:
        raise NotPlain(f"an unclosed {quote} quote: {line}")
    stages.append("".join(current))
    commands = [shlex.split(stage) for stage in stages]
    if any(not words for words in commands):
        raise NotPlain(f"an empty command: {line}")
    return commands


def run_printed(line: str, cwd: Path | None = None) -> Result:
    """Run `line` as `bash -o pipefail -c` would, from `cwd`, with `lg` as
    this tree's: each stage's stdout is the next one's stdin; the exit code is
    the last non-zero one; stderr is every stage's, in order."""
    commands = pipeline(line)
    if any(words[0] != "lg" for words in commands):
        raise NotPlain(f"a command other than lg: {line}")
    code, piped, stderr = 0, b"", ""
    for words in commands:
        done = run_lg_inproc(*words[1:], stdin=piped, cwd=cwd)
        code = done.code or code
        piped, stderr = done.stdout, stderr + done.stderr
    return Result(code, piped, stderr)
