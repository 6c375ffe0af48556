"""tests/printed.py reads a printed line as bash does, and refuses what it does not read."""

from __future__ import annotations

import os
import subprocess

import pytest

import printed
from conftest import Result
from printed import NotPlain, pipeline, run_printed

# Lines of the shapes lg prints: quoted paths with spaces and quotes in them, pipes, a trailing comment.
LINES = [
    "lg shrink v.safetensors --depth 1 -o out.safetensors",
    "lg grow 'hinted out.safetensors' --depth 4 -o - | lg shrink - --width 16 --heads 1 -o 'a b.safetensors' --force",
    "lg grow t.lg.safetensors --depth 2 --width 32 -o tleg-depth2-width32.safetensors  # any depth; trained widths 32",
    "lg shrink '/tmp/it'\"'\"'s here/v.safetensors' --depth 1 -o '-|x' | lg inspect - --json",
    "lg eval \"two words\" --data fashion-mnist-mini --steps 100 --lr 1e-3,3e-4 --calibrate a+b@c:d%e=f",
    "lg shrink src#1 --depth 1 -o o.safetensors #a comment with | and $HOME",
]


def bash_words(line: str) -> list[list[str]]:
    """What bash passes to each `lg` in `line`: every stage copies its stdin on, then adds its own words."""
    script = "lg() { cat; printf '%s\\0' \"$@\"; printf '\\1'; }; set -o pipefail; " + line
    done = subprocess.run(["bash", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, check=True)
    stages = done.stdout.split(b"\1")[:-1]
    return [["lg", *(word.decode() for word in stage.split(b"\0")[:-1])] for stage in stages]


def test_each_line_splits_into_the_words_bash_gives_each_lg():
    for line in LINES:
        assert pipeline(line) == bash_words(line), line


@pytest.mark.parametrize("line", [
    "lg shrink $HOME/v.safetensors -o o",           # an expansion
    "lg shrink ~/v.safetensors -o o",               # a tilde
    "lg shrink *.safetensors -o o",                  # a glob
    "lg shrink v -o o; rm -rf x",                    # a second command
    "lg shrink v -o o && lg inspect o",
    "lg shrink v -o - > o",                          # a redirection
    "lg shrink v -o -|lg inspect -",                 # a pipe bash reads, not spaced as lg prints them
    "lg shrink \"$(whoami)\" -o o",                  # an expansion inside double quotes
    "lg shrink 'unclosed -o o",
    "lg shrink v -o - | ",
    "lg shrink {a,b} -o o",                          # brace expansion
])
def test_lines_using_more_of_the_shell_are_refused(line):
    with pytest.raises(NotPlain):
        pipeline(line)


def test_a_command_other_than_lg_is_refused():
    with pytest.raises(NotPlain, match="other than lg"):
        run_printed("lg inspect - | python -c 1")


def test_stdout_feeds_the_next_stage_and_the_last_failure_is_the_code(monkeypatch, tmp_path):
    """As `bash -o pipefail`: the rightmost non-zero exit; each stage reads the one before; each from the directory given."""
    seen = []

    def fake_lg(*args, stdin=b"", cwd=None):
        assert cwd == tmp_path  # run from the directory given
        seen.append((args, stdin))
        return Result(int(args[1]), f"{args[0]}-out".encode(), f"{args[0]} said\n")

    monkeypatch.setattr(printed, "run_lg_inproc", fake_lg)
    done = run_printed("lg a 3 | lg b 0 | lg c 2 | lg d 0", cwd=tmp_path)
    assert seen == [(("a", "3"), b""), (("b", "0"), b"a-out"), (("c", "2"), b"b-out"), (("d", "0"), b"c-out")]
    assert (done.code, done.stdout, done.stderr) == (2, b"d-out", "a said\nb said\nc said\nd said\n")


def test_lg_in_this_process_runs_from_the_directory_given_and_comes_back(tmp_path, lg):
    (tmp_path / "notes.txt").write_text("Things to try on Monday\n")
    here = os.getcwd()
    done = lg("inspect", "notes.txt", cwd=tmp_path)  # read there: it is text, not missing
    assert done.code == 1 and "it begins with the text 'Things t'" in done.stderr, done.stderr
    assert os.getcwd() == here
