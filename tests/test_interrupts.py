"""Signals during a real write (issue 20, item 4): SIGINT, SIGTERM and SIGHUP,
once or twice, as the write starts, in its middle and during the rename that
puts the output in place. Whatever the moment, lg keeps its invariants: the
conventional exit status (128 + the signal), one line on stderr and no
traceback, no temporary file left, and an existing output either untouched
or replaced by the complete new one (a signal that comes during the rename
waits until the output is in place, and the line says so).

Each case runs `lg` in a fresh interpreter whose own code sends the signal
at the chosen moment (`DRIVER`), so the moments are exact, not timed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch

from conftest import make_vit, write_plain

DRIVER = r'''
import os, signal, sys
moment, name, times, output = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sig = getattr(signal, name)

def fire():
    for _ in range(times):
        os.kill(os.getpid(), sig)

import lgcli.saving, lgcli.checkpoint.writing
if moment == "start":  # the output is about to be written: nothing of it exists yet
    real_write = lgcli.saving.write_tensors
    def write_tensors(*args, **kwargs):
        fire()
        return real_write(*args, **kwargs)
    lgcli.saving.write_tensors = write_tensors
elif moment == "middle":  # the first tensors are in the temporary file, the rest are not
    real_stream = lgcli.checkpoint.writing._stream_safetensors
    def _stream_safetensors(out, encoded, tensors, *args, **kwargs):
        def signalled():
            for index, tensor in enumerate(tensors):
                if index == 2:
                    fire()
                yield tensor
        return real_stream(out, encoded, signalled(), *args, **kwargs)
    lgcli.checkpoint.writing._stream_safetensors = _stream_safetensors
elif moment == "rename":  # the signal arrives as the output is renamed into place
    real_replace = os.replace
    def replace(src, dst, *args, **kwargs):
        if os.path.basename(str(dst)) == os.path.basename(output):
            fire()
        return real_replace(src, dst, *args, **kwargs)
    os.replace = replace
from lgcli.cli import main
main(sys.argv[5:])
'''

SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"]
MOMENTS = ["start", "middle", "rename"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("source")
    return write_plain(make_vit(depth=3, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7,
                                num_classes=10), folder / "v.safetensors")


def run(moment: str, name: str, times: int, output: Path, args: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DRIVER, moment, name, str(times), str(output), *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def check(done: subprocess.CompletedProcess, name: str, moment: str, folder: Path, expected: set[str]) -> None:
    assert done.returncode == 128 + getattr(signal, name), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    if moment == "rename":
        assert lines[0].startswith(f"lg: error: interrupted ({name}) after ") and "written in full" in lines[0]
    else:
        assert lines[0] == f"lg: error: interrupted ({name}); nothing written"
    assert set(os.listdir(folder)) == expected  # no temporary file, nothing else


# Every signal at every moment, and every moment and signal once and twice
# (a pairwise cover: each pair of the three factors is met, in 9 runs, not 27):
# one handler serves the three signals alike, and each run is a fresh
# interpreter (about 12 s on a loaded machine).
PAIRWISE = [("SIGINT", "start", 1), ("SIGINT", "middle", 2), ("SIGINT", "rename", 1),
            ("SIGTERM", "start", 2), ("SIGTERM", "middle", 1), ("SIGTERM", "rename", 2),
            ("SIGHUP", "start", 1), ("SIGHUP", "middle", 2), ("SIGHUP", "rename", 2)]


@pytest.mark.parametrize("name,moment,times", PAIRWISE)
def test_a_signal_during_a_write_keeps_the_invariants(source, tmp_path, name, moment, times):
    output = tmp_path / "o.safetensors"
    output.write_bytes(b"an earlier output")
    done = run(moment, name, times, output, ["shrink", source, "--depth", "2", "-o", output, "--force"])
    check(done, name, moment, tmp_path, {"o.safetensors"})
    if moment == "rename":  # the signal waited: the new output is whole
        assert len(safetensors.torch.load_file(str(output))) > 0
    else:
        assert output.read_bytes() == b"an earlier output"


@pytest.fixture(scope="module")
def folder_source_and_output(tmp_path_factory):
    """A GPT-2 folder and an earlier lg output of it (made once: each is a
    fresh interpreter importing transformers)."""
    from text_models import make_model, save_folder

    root = tmp_path_factory.mktemp("folders")
    src = save_folder(make_model("gpt2-lm"), root / "src", "gpt2-lm")
    first = subprocess.run([sys.executable, "-m", "lgcli", "shrink", src, "--depth", "2", "-o", root / "out"],
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    return src, root / "out"


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_signal_while_a_model_folder_is_replaced(folder_source_and_output, tmp_path, moment):
    """A Hugging Face folder output replacing an earlier one: the old folder
    is moved aside and the new one renamed in with signals held, so a signal
    never leaves neither."""
    import shutil

    src, earlier = folder_source_and_output
    work = tmp_path / "work"
    work.mkdir()
    output = work / "out"
    shutil.copytree(earlier, output)
    before = {name: (output / name).read_bytes() for name in os.listdir(output)}
    done = run(moment, "SIGTERM", 2, output, ["shrink", src, "--depth", "1", "-o", output, "--force"])
    check(done, "SIGTERM", moment, work, {"out"})
    after = {name: (output / name).read_bytes() for name in os.listdir(output)}
    if moment == "rename":
        assert set(after) == set(before) and after["config.json"] != before["config.json"]  # the new, whole
    else:
        assert after == before


def test_a_long_output_name_fits_its_temporary_name(source, tmp_path):
    """A 238-character output name: the temporary file beside it is named
    within the file system's 255 bytes (it used to fail)."""
    output = tmp_path / ("m" * 226 + ".safetensors")
    done = subprocess.run([sys.executable, "-m", "lgcli", "shrink", source, "--depth", "2", "-o", output],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path) == [output.name]
