"""Issue 32: interrupts never lost, outputs never written by a command that
fails, the hub cache never left, resumes that check what they resume, hints
that run as printed, and the lines the issue found misleading.

Each test here failed before the change it comes with (the report of the
branch says which)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch

from conftest import make_vit, run_lg, write_plain

# ---- 1. A signal at any moment, start-up and imports included ----

# `lg` as its script runs it (lgcli.__main__.main), with the signal sent by
# the process itself at an exact moment: when a module is first imported
# (typer: before lgcli.cli's handler exists; numpy: inside torch's import,
# which swallows what its import of numpy raises; torch._C), or as the
# interpreter shuts down (an atexit callback).
STARTUP_DRIVER = r'''
import atexit, os, signal, sys
moment, name, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
sig = getattr(signal, name)

def fire():
    for _ in range(times):
        os.kill(os.getpid(), sig)

if moment == "exit":
    atexit.register(fire)
else:
    class SignalOnImport:
        fired = False
        def find_spec(self, fullname, path=None, target=None):
            if fullname == moment and not SignalOnImport.fired:
                SignalOnImport.fired = True
                fire()
            return None
    sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["lg", *sys.argv[4:]]
from lgcli.__main__ import main
main()
'''


@pytest.fixture(scope="module")
def small_vit(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("vit")
    return write_plain(make_vit(depth=3, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7,
                                num_classes=10), folder / "v.safetensors")


def _signalled_run(moment: str, name: str, times: int, args: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STARTUP_DRIVER, moment, name, str(times), *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.parametrize("moment,name,times", [
    ("typer", "SIGINT", 1), ("typer", "SIGINT", 2), ("typer", "SIGHUP", 1),
    ("numpy", "SIGINT", 1), ("numpy", "SIGTERM", 1), ("numpy", "SIGHUP", 2), ("numpy", "SIGINT", 2),
    ("torch._C", "SIGTERM", 1), ("torch._C", "SIGINT", 2)])
def test_a_signal_during_start_up_or_imports_leaves_the_destination(small_vit, tmp_path, moment, name, times):
    output = tmp_path / "o.safetensors"
    output.write_bytes(b"an earlier output")
    done = _signalled_run(moment, name, times, ["shrink", small_vit, "--depth", "2", "-o", output, "--force"])
    assert done.returncode == 128 + getattr(signal, name), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [f"lg: error: interrupted ({name}); nothing written"]
    assert output.read_bytes() == b"an earlier output"
    assert os.listdir(tmp_path) == ["o.safetensors"]  # no temporary file


@pytest.mark.parametrize("name,times", [("SIGINT", 2), ("SIGTERM", 1)])
def test_a_signal_as_lg_exits_is_one_line_and_its_status(small_vit, tmp_path, name, times):
    """A (second) Ctrl-C while the interpreter shuts down: no 'Exception
    ignored in atexit' traceback, no exit by the signal (-2): one line, 128 + it."""
    output = tmp_path / "o.safetensors"
    done = _signalled_run("exit", name, times, ["shrink", small_vit, "--depth", "2", "-o", output])
    assert done.returncode == 128 + getattr(signal, name), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"lg: error: interrupted ({name}) as lg was exiting"
    assert len(safetensors.torch.load_file(str(output))) > 0  # written before: whole
