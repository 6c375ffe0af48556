"""Issue 32: interrupts never lost, outputs never written by a command that
fails, the hub cache never left, resumes that check what they resume, hints
that run as printed, and the lines the issue found misleading.

Each test here failed before the change it comes with (the report of the
branch says which)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch

from conftest import make_vit, write_plain
from printed import run_printed

# ---- 1. A signal at any moment, start-up and imports included ----

# `lg` as its script runs it (lgcli.__main__.main), with the signal sent by
# the process itself at an exact moment: when a module is first imported
# (typer: before lgcli.cli's handler exists; numpy: inside torch's import,
# which swallows what its import of numpy raises; torch._C), or as the
# interpreter shuts down: an atexit callback run before lg's last one
# ("exit", registered once lgcli.cli is imported) or after it ("exit-last").
STARTUP_DRIVER = r'''
import atexit, os, signal, sys
moment, name, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
sig = getattr(signal, name)

def fire():
    for _ in range(times):
        os.kill(os.getpid(), sig)

if moment == "exit-last":
    atexit.register(fire)
elif moment == "exit":
    class RegisterOnImport:
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "lgcli.cli":
                atexit.register(fire)
            return None
    sys.meta_path.insert(0, RegisterOnImport())
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


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_after_lgs_last_exit_function_leaves_the_commands_status(small_vit, tmp_path, name):
    """The interpreter's module teardown put the signals' default action
    back: a Ctrl-C there ended lg by the signal (status 130) with no word,
    after it had written its output and said so. From lg's last exit
    function on, a signal is ignored: the command's status and lines stand."""
    output = tmp_path / "o.safetensors"
    done = _signalled_run("exit-last", name, 1, ["shrink", small_vit, "--depth", "2", "-o", output])
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "interrupted" not in done.stderr and f"wrote {output}" in done.stderr, done.stderr
    assert len(safetensors.torch.load_file(str(output))) > 0


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


# ---- 4. The hub cache is never left ----

COMMIT = "c" * 40
REF_TEXTS = [COMMIT, COMMIT + "\n", "../../../elsewhere", "{elsewhere}", "", "  ", "main", "../snapshots/" + COMMIT,
             "d" * 40, "C" * 40, COMMIT + "/../../../elsewhere"]
SNAPSHOT_KINDS = ["folder", "link to elsewhere", "link to the other repo's", "link with .. to itself", "missing"]
FILE_KINDS = ["blob, relative", "blob, absolute", "blob through ..", "plain file", "elsewhere", "elsewhere through ..",
              "other repo's blob", "missing blob", "folder link"]


def _tensors_file(path: Path, name: str) -> bytes:
    import torch

    safetensors.torch.save_file({name: torch.zeros(2)}, str(path))
    return path.read_bytes()


def _lay_out_cache(root: Path, ref_text: str, snapshot_kind: str, file_kind: str) -> tuple[Path, Path]:
    """A cache holding org/name (whose one weights file has the tensor
    'inside') and org/other, with a folder elsewhere (tensor 'outside');
    refs/main, the snapshot folder and its model.safetensors as drawn.
    Returns (cache, elsewhere)."""
    import shutil

    if root.exists():
        shutil.rmtree(root)
    cache, elsewhere = root / "cache", root / "elsewhere"
    elsewhere.mkdir(parents=True)
    _tensors_file(elsewhere / "model.safetensors", "outside")  # the folder a hostile ref points to
    repos = {}
    for repo in ("name", "other"):
        repo_folder = cache / f"models--org--{repo}"
        (repo_folder / "blobs").mkdir(parents=True)
        (repo_folder / "refs").mkdir()
        blob = repo_folder / "blobs" / ("1" * 64)
        blob.write_bytes(_tensors_file(root / "t.safetensors", "inside" if repo == "name" else "other"))
        (repo_folder / "snapshots" / COMMIT).mkdir(parents=True)
        os.symlink(os.path.relpath(blob, repo_folder / "snapshots" / COMMIT),
                   repo_folder / "snapshots" / COMMIT / "model.safetensors")
        (repo_folder / "refs" / "main").write_text(COMMIT)
        repos[repo] = repo_folder
    repo_folder, other = repos["name"], repos["other"]
    (repo_folder / "refs" / "main").write_text(ref_text.format(elsewhere=elsewhere))
    snapshot = repo_folder / "snapshots" / COMMIT
    weights = snapshot / "model.safetensors"
    blob = repo_folder / "blobs" / ("1" * 64)
    if file_kind != "blob, relative":
        weights.unlink()
        target = {"blob, absolute": str(blob), "blob through ..": f"../../../models--org--name/blobs/{blob.name}",
                  "elsewhere": str(elsewhere / "model.safetensors"),
                  "elsewhere through ..": os.path.relpath(elsewhere / "model.safetensors", snapshot),
                  "other repo's blob": os.path.relpath(other / "blobs" / blob.name, snapshot),
                  "missing blob": "../../blobs/" + "2" * 64, "folder link": str(elsewhere)}.get(file_kind)
        if target is None:  # a plain file: a cache made without links
            weights.write_bytes(blob.read_bytes())
        else:
            os.symlink(target, weights)
    if snapshot_kind != "folder":
        shutil.rmtree(snapshot)
        target = {"link to elsewhere": str(elsewhere), "link to the other repo's": str(other / "snapshots" / COMMIT),
                  "link with .. to itself": f"../../models--org--other/snapshots/{COMMIT}"}.get(snapshot_kind)
        if target is not None:
            os.symlink(target, snapshot)
    return cache, elsewhere


def test_hub_cache_layouts_are_read_only_inside_the_repository(tmp_path, monkeypatch):
    """Property (hypothesis): whatever refs/main holds and whatever the
    snapshot folder and its weights file are (links anywhere, '..' in every
    component), lg reads org/name's own weights from inside its repository
    folder, or refuses in one line (an LgError) naming a path."""
    import huggingface_hub.constants
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from lgcli.checkpoint import read_checkpoint
    from lgcli.errors import LgError
    from lgcli.hub import resolve_source

    root = tmp_path / "layout"
    refusals: list[str] = []

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.sampled_from(REF_TEXTS), st.sampled_from(SNAPSHOT_KINDS), st.sampled_from(FILE_KINDS))
    def check(ref_text, snapshot_kind, file_kind):
        cache, elsewhere = _lay_out_cache(root, ref_text, snapshot_kind, file_kind)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
        repo_folder = os.path.realpath(cache / "models--org--name")
        try:
            path = resolve_source("org/name")
            checkpoint = read_checkpoint(path, header_only=True)
        except LgError as refused:
            assert "\n" not in str(refused) and (str(cache) in str(refused) or "org/name" in str(refused))
            refusals.append(str(refused))
            return
        assert list(checkpoint.tensors) == ["inside"], (ref_text, snapshot_kind, file_kind)
        assert os.path.realpath(path).startswith(repo_folder + os.sep)
        for entry in Path(path if os.path.isdir(path) else os.path.dirname(path)).iterdir():
            real = os.path.realpath(entry)
            assert real.startswith(os.path.join(repo_folder, "blobs") + os.sep) or not os.path.islink(entry)
        expected_good = (ref_text.strip() == COMMIT and snapshot_kind == "folder"
                         and file_kind in ("blob, relative", "blob, absolute", "blob through ..", "plain file"))
        assert expected_good, (ref_text, snapshot_kind, file_kind)

    check()
    assert refusals  # the layouts that lead elsewhere were met, and refused


@pytest.mark.parametrize("ref_text,says", [
    ("", "refs/main: is empty, where the commit of revision main belongs (a download cut short?)"),
    ("d" * 40, f"org/name: revision main names commit {'d' * 40}, whose snapshot is not in the local Hugging Face "
               f"cache"),
    ("../../../elsewhere", "refs/main: holds ../../../elsewhere, not a 40-hex commit hash"),
])
def test_a_broken_ref_is_said_for_what_it_is(tmp_path, monkeypatch, ref_text, says):
    """10: an empty refs/main was reported as '.../snapshots: a folder must
    hold a Hugging Face model', a ref naming a missing snapshot as 'revision
    main is not in the cache ... it holds main'."""
    import huggingface_hub.constants

    from lgcli.errors import LgError
    from lgcli.hub import resolve_source

    cache, _ = _lay_out_cache(tmp_path / "layout", ref_text, "folder", "blob, relative")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    with pytest.raises(LgError) as refused:
        resolve_source("org/name")
    assert says in str(refused.value)
    assert "it holds main" not in str(refused.value) and "a folder must hold" not in str(refused.value)


# ---- 7. float8 weights: read, checked, and kept in their dtype ----

@pytest.mark.parametrize("dtype_name,stored", [("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")])
def test_float8_weights_are_resized_in_their_own_dtype(lg, small_vit, tmp_path, dtype_name, stored):
    """It was 'internal error ... isfinite not implemented for Float8_e4m3fn'.
    select copies weights: the float8 output is exactly the float32 resize
    of the same values, in float8 again."""
    import torch
    from safetensors import safe_open

    dtype = getattr(torch, dtype_name)
    source = safetensors.torch.load_file(str(small_vit))
    with safe_open(str(small_vit), "pt") as f:
        metadata = f.metadata()
    low = {k: v.to(dtype) for k, v in source.items()}
    safetensors.torch.save_file(low, str(tmp_path / "f8.safetensors"), metadata=metadata)
    safetensors.torch.save_file({k: v.float() for k, v in low.items()}, str(tmp_path / "f32.safetensors"),
                                metadata=metadata)
    args = ["--source-heads", "2", "--depth", "2", "--width", "16", "--heads", "1", "--method", "select"]
    done = lg("shrink", tmp_path / "f8.safetensors", *args, "-o", tmp_path / "o8.safetensors")
    assert done.code == 0, done.stderr
    assert lg("shrink", tmp_path / "f32.safetensors", *args, "-o", tmp_path / "o32.safetensors").code == 0
    with safe_open(str(tmp_path / "o8.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {stored}
    resized, reference = (safetensors.torch.load_file(str(tmp_path / name)) for name in ("o8.safetensors",
                                                                                         "o32.safetensors"))
    assert resized.keys() == reference.keys()
    for key in resized:
        assert resized[key].view(torch.uint8).equal(reference[key].to(dtype).view(torch.uint8)), key
    # A NaN among float8 weights is refused as any non-finite weight is, naming the tensor.
    key = next(k for k in low if k.endswith("fc1.weight"))
    low[key][0, 0] = float("nan")
    safetensors.torch.save_file(low, str(tmp_path / "nan.safetensors"), metadata=metadata)
    done = lg("shrink", tmp_path / "nan.safetensors", *args, "-o", tmp_path / "nan-out.safetensors")
    assert done.code == 1 and len(done.stderr.splitlines()) == 1
    assert f"tensor {key} holds 1 non-finite value (NaN or Inf)" in done.stderr


# ---- 8. --device meta (a device that holds no data): one line, before any work ----

@pytest.mark.parametrize("command", ["condense", "bench", "eval"])
def test_a_device_holding_no_data_is_one_line_before_any_work(lg, ancestry, tmp_path, command):
    args = {"condense": ["--method", "tleg", "--steps", "1", "-o", tmp_path / "o.lg.safetensors"],
            "bench": ["--sizes", "1x32", "--methods", "select", "--steps", "1", "--condense-steps", "1",
                      "-o", tmp_path / "results"],
            "eval": ["--steps", "1"]}[command]
    done = lg(command, ancestry, "--data", "fashion-mnist-mini", *args, "--device", "meta")
    assert done.code == 2  # a usage mistake, as lg shrink and grow say it (tests/test_command_line_forms.py)
    assert done.stderr.strip().splitlines() == [
        "lg: error: --device meta: not a device lg runs on (it holds no data: lg trains and scores real numbers); "
        "give auto, cpu, cuda or cuda:N"]
    assert os.listdir(tmp_path) == []  # bench made its cells/ folder first


# ---- 6. Every printed pipe runs as printed, with the options the user gave ----

@pytest.mark.parametrize("case", ["tleg-fit", "mixed change"])
def test_a_refusals_pipe_runs_as_printed(small_vit, tmp_path, case, lg):
    """tleg-fit's pipe dropped --source-heads (and read SRC, wrote OUT);
    neither pipe carried --force for an output that exists."""

    (tmp_path / "v.safetensors").write_bytes(small_vit.read_bytes())
    (tmp_path / "out.safetensors").write_bytes(b"an earlier output")  # --force is needed to replace it
    if case == "tleg-fit":
        args = ["shrink", "v.safetensors", "--method", "tleg-fit", "--depth", "2", "--width", "16", "--heads", "1"]
    else:
        args = ["grow", "v.safetensors", "--depth", "4", "--width", "16", "--heads", "1"]
    done = lg(*args, "--source-heads", "2", "-o", "out.safetensors", "--force", cwd=tmp_path)
    assert done.code == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    pipe = done.stderr.split("`")[1] if case == "tleg-fit" else done.stderr.split("pipe the two: ")[1].strip()
    assert "--source-heads 2" in pipe and "--force" in pipe and "SRC" not in pipe and "OUT" not in pipe, pipe
    ran = run_printed(pipe, tmp_path)
    assert ran.code == 0, (pipe, ran.stderr)
    inspected = json.loads(lg("inspect", "out.safetensors", "--json", cwd=tmp_path).stdout)
    assert (inspected["depth"], inspected["width"], inspected["heads"]) == ((2 if case == "tleg-fit" else 4), 16, 1)


def test_a_tleg_learngenes_width_pipe_runs_as_printed(small_vit, tmp_path, lg):
    """It read 'lg grow LG ... -o OUT': neither path, nor --force."""
    (tmp_path / "t.lg.safetensors").write_bytes(b"")
    made = lg("condense", small_vit, *CONDENSE, "-o", tmp_path / "t.lg.safetensors", "--force")
    assert made.code == 0, made.stderr
    (tmp_path / "out.safetensors").write_bytes(b"an earlier output")
    done = lg("grow", "t.lg.safetensors", "--depth", "4", "--width", "64", "--heads", "4", "-o", "out.safetensors",
                  "--force", cwd=tmp_path)
    assert done.code == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    pipe = done.stderr.split("resize method: ")[1].strip()
    assert pipe.startswith("lg grow t.lg.safetensors --depth 4 -o - | ") and pipe.endswith(" -o out.safetensors --force")
    ran = run_printed(pipe, tmp_path)
    assert ran.code == 0, (pipe, ran.stderr)


def test_a_tleg_learngenes_mixed_width_change_gets_a_pipe_that_runs(small_vit, tmp_path, lg):
    """Width 32 -> 48 with heads 2 -> 1 (the head dim 16 -> 48) grows some
    sizes and shrinks others: the line printed `lg shrink - ... -o - | lg
    grow - ... -o OUT`, placeholders a shell cannot run."""
    made = lg("condense", small_vit, *CONDENSE, "-o", tmp_path / "t.lg.safetensors")
    assert made.code == 0, made.stderr
    done = lg("grow", "t.lg.safetensors", "--depth", "4", "--width", "48", "--heads", "1", "-o",
                  "out.safetensors", cwd=tmp_path)
    assert done.code == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "..." not in done.stderr and not (tmp_path / "out.safetensors").exists()
    pipe = done.stderr.split("by a shrink and a grow: ")[1].strip()
    assert pipe.startswith("lg grow t.lg.safetensors --depth 4 -o - | lg shrink - ") and " | lg grow - " in pipe
    assert pipe.endswith(" -o out.safetensors")
    ran = run_printed(pipe, tmp_path)
    assert ran.code == 0, (pipe, ran.stderr)
    inspected = json.loads(lg("inspect", "out.safetensors", "--json", cwd=tmp_path).stdout)
    assert (inspected["depth"], inspected["width"], inspected["heads"]) == (4, 48, 1)


# ---- 10. Lines that misled ----

def test_a_size_too_large_for_a_bench_is_not_called_malformed():
    from lgcli.bench import parse_sizes
    from lgcli.errors import UsageError

    with pytest.raises(UsageError) as refused:
        parse_sizes("3x64,1000000000x64")
    assert str(refused.value) == "--sizes 1000000000x64: depth 1000000000 is too large (a bench builds depths up to " \
                                 "999,999)"
    with pytest.raises(UsageError, match="takes DEPTHxWIDTH pairs"):
        parse_sizes("3xx64")  # malformed is still malformed


def test_refusing_to_write_names_the_output(small_vit, tmp_path, monkeypatch):
    """The family's check that its library loads what lg writes said
    'refusing to write: ...' without naming the file."""
    import lgcli
    from lgcli.arch import get_adapter
    from lgcli.errors import LgError

    loaded = lgcli.load(small_vit, heads=2)
    adapter = type(get_adapter(loaded.spec.family))

    def refuse(self, spec, shapes):
        raise LgError("refusing to write: the model lacks tensor cls_token for the timm config it records")

    monkeypatch.setattr(adapter, "check_loadable", refuse)
    output = tmp_path / "o.safetensors"
    with pytest.raises(LgError) as refused:
        lgcli.save(output, loaded.spec, loaded.stack, source=loaded)
    assert str(refused.value).startswith(f"{output}: refusing to write: ")
    assert not output.exists()


# ---- A dependency missing from the installation ----

MISSING_DRIVER = r'''
import sys
sys.modules[sys.argv[1]] = None  # its import now raises ModuleNotFoundError, as when it is not installed
sys.argv = ["lg", *sys.argv[2:]]
from lgcli.__main__ import main
main()
'''


def test_a_missing_dependency_is_one_line_with_the_pip_command_and_nothing_written(small_vit, tmp_path):
    """A lent GPU's Python lacked PyWavelets: `lg shrink --method bot` said
    "internal error: this is a bug in lg". It is the installation, not lg:
    one line naming the package and the pip command that installs it."""
    output = tmp_path / "out.safetensors"
    proc = subprocess.run([sys.executable, "-c", MISSING_DRIVER, "pywt", "shrink", str(small_vit), "--depth", "2",
                           "--width", "16", "--source-heads", "2", "--method", "bot", "-o", str(output)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "lg: error: the Python package 'pywt' is not installed here, and lg needs it for this "
        "(pip install PyWavelets)"]
    assert not output.exists() and list(tmp_path.iterdir()) == []


def test_a_missing_module_of_lg_itself_is_still_a_bug():
    from lgcli.cli import missing_dependency

    assert missing_dependency(ModuleNotFoundError("No module named 'lgcli.nowhere'", name="lgcli.nowhere")) is None
    assert missing_dependency(ValueError("x")) is None
    assert missing_dependency(ModuleNotFoundError("No module named 'yaml'", name="yaml")).endswith(
        "(pip install PyYAML)")


def test_the_resume_hint_of_a_piped_model_says_to_pipe_it_in_again(tmp_path, monkeypatch):
    """Resuming reads the model again: from stdin, the same one piped in (the
    hint as printed alone would read an empty stdin)."""
    from lgcli.commands import training

    saved = tmp_path / "o.train.pt"
    saved.write_bytes(b"saved")
    monkeypatch.setattr(training, "invocation", ["distill", "-", "--teacher", "t.safetensors", "-o", "o"])
    assert training._condense_resume_hint(str(saved), 10) == (
        f"; the run so far is saved in {saved}: continue it by piping the same model into: "
        f"lg distill - --teacher t.safetensors -o o --resume")
    monkeypatch.setattr(training, "invocation", ["distill", "s.safetensors", "--teacher", "t.safetensors", "-o", "-"])
    assert training._condense_resume_hint(str(saved), 10).endswith(
        ": continue it with: lg distill s.safetensors --teacher t.safetensors -o - --resume")
