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


# ---- 3. A command that fails writes nothing ----

def _unwritable_folder() -> Path:
    """A folder no file can be made in, even by root (sysfs)."""
    folder = Path("/sys")
    try:
        probe = os.open(folder / "lg-probe", os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        return folder
    os.close(probe)
    os.unlink(folder / "lg-probe")
    pytest.skip("/sys accepts new files here")


def test_a_card_that_cannot_be_written_leaves_no_model(lg, small_vit, tmp_path):
    output = tmp_path / "o.safetensors"
    card = _unwritable_folder() / "card.md"
    done = lg("shrink", small_vit, "--depth", "2", "-o", output, "--card", card)
    assert done.code == 1
    assert done.stderr.strip().splitlines() == [f"lg: error: {card}: cannot be written (permission denied)"]
    assert os.listdir(tmp_path) == []  # the model was written anyway, before


CONDENSE = ["--teacher-heads", "2", "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2",
            "--batch-size", "8", "--depths", "2-3"]


@pytest.fixture(scope="module")
def finished_run(small_vit, tmp_path_factory):
    """A condense run of 2 steps, its training checkpoint and its learngene."""
    from conftest import run_lg_inproc

    folder = tmp_path_factory.mktemp("run")
    done = run_lg_inproc("condense", small_vit, *CONDENSE, "--checkpoint", folder / "train.pt",
                         "-o", folder / "first.lg.safetensors")
    assert done.code == 0, done.stderr
    return folder


def test_resuming_a_finished_run_writes_its_own_learngene(lg, small_vit, finished_run, tmp_path):
    """It used to fail on an internal error after writing the learngene."""
    output = tmp_path / "again.lg.safetensors"
    done = lg("condense", small_vit, *CONDENSE, "--checkpoint", finished_run / "train.pt", "--resume", "-o", output)
    assert done.code == 0, done.stderr
    assert "internal error" not in done.stderr and "no step left to train" in done.stderr
    first = safetensors.torch.load_file(str(finished_run / "first.lg.safetensors"))
    again = safetensors.torch.load_file(str(output))
    assert first.keys() == again.keys() and all(first[k].equal(again[k]) for k in first)


# ---- 5. --resume checks what the training checkpoint was made from ----

@pytest.fixture(scope="module")
def other_teacher(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("other")
    return write_plain(make_vit(seed=7, depth=3, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7,
                                num_classes=10), folder / "w.safetensors")


@pytest.mark.parametrize("change,names", [
    ("teacher", ["teacher_sha256"]),
    ("data", ["data train", "reading subset"]),
    ("depths", ["options depths"]),
])
def test_resuming_another_run_is_refused_saying_what_differs(lg, small_vit, other_teacher, finished_run, tmp_path,
                                                             change, names):
    teacher, args = small_vit, list(CONDENSE)
    if change == "teacher":
        teacher = other_teacher
    elif change == "data":
        args += ["--subset", "512"]
    else:
        args[args.index("2-3")] = "2-4"
    output = tmp_path / "o.lg.safetensors"
    done = lg("condense", teacher, *args, "--checkpoint", finished_run / "train.pt", "--resume", "-o", output)
    assert done.code == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: cannot resume "), done.stderr
    assert all(name in lines[0] for name in names), lines[0]
    assert os.listdir(tmp_path) == []


# ---- 9. A bad --resume file: one line that says what is wrong with it ----

def test_a_bad_resume_file_is_one_line(lg, small_vit, finished_run, tmp_path):
    import pickle

    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes((finished_run / "train.pt").read_bytes()[:3000])
    ran = tmp_path / "the pickle ran"

    class RunsCode:
        def __reduce__(self):
            return (os.mkdir, (str(ran),))

    with_code = tmp_path / "code.pt"
    with_code.write_bytes(pickle.dumps({"model": RunsCode()}))
    for state, says in ((truncated, "damaged or truncated"), (with_code, "lg never unpickles")):
        output = tmp_path / "o.lg.safetensors"
        done = lg("condense", small_vit, *CONDENSE, "--checkpoint", state, "--resume", "-o", output)
        assert done.code == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], done.stderr  # no plan or device line before it
        assert "weights_only" not in lines[0] and "index out of range" not in lines[0]
        assert not output.exists() and not ran.exists()


# ---- 2. lg bench -o: a folder lg did not make is not lg's to write into ----

@pytest.fixture(scope="module")
def ancestry(tmp_path_factory) -> Path:
    """A ViT whose file records its heads (a bench builds every cell from them)."""
    import lgcli

    path = tmp_path_factory.mktemp("ancestry") / "ancestry.safetensors"
    lgcli.save_model(make_vit(depth=2, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7,
                              num_classes=10).eval(), path)
    return path


def _tiny_bench(force: bool = False):
    from lgcli.bench import BenchSettings
    from lgcli.evaluate import ProbeSettings

    return BenchSettings(sizes=[(1, 32)], methods=["select"], subset="64", test_subset="40", condense_steps=1,
                         probe=ProbeSettings(steps=1, eval_every=1, batch_size=16, progress=False), force=force)


@pytest.mark.parametrize("layout", ["own summary", "cells and notes"])
def test_bench_refuses_a_folder_holding_files_it_did_not_write(lg, ancestry, tmp_path, layout):
    out = tmp_path / "results"
    out.mkdir()
    if layout == "own summary":  # a figure the user made, named as lg's
        mine, name = out / "summary.png", "summary.png"
    else:  # a bench folder the user added notes to
        (out / "cells").mkdir()
        mine, name = out / "notes.txt", "notes.txt"
    mine.write_bytes(b"the user's own")
    done = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "1x32", "--methods", "select",
              "--steps", "1", "--condense-steps", "1", "-o", out)
    assert done.code == 1
    assert done.stderr.strip().splitlines() == [
        f"lg: error: {out}: holds {name}, which lg bench did not write; give a new or empty folder, or pass --force "
        f"to write into it anyway (lg replaces only the files it names as its own there and leaves every other "
        f"file as it is)"]
    assert mine.read_bytes() == b"the user's own"
    assert sorted(os.listdir(out)) == sorted({name, "cells"} if layout != "own summary" else {name})


def test_bench_with_force_leaves_the_users_other_files(ancestry, tmp_path):
    from lgcli.bench import bench

    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"the user's own")
    bench(ancestry, "fashion-mnist-mini", out, _tiny_bench(force=True), notify=lambda message: None)
    assert (out / "notes.txt").read_bytes() == b"the user's own"
    assert (out / "bench.json").is_file()
    # lg's own folder, run again without --force: its cells are reused, nothing refused
    (out / "notes.txt").unlink()
    bench(ancestry, "fashion-mnist-mini", out, _tiny_bench(), notify=lambda message: None)
