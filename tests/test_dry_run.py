"""--dry-run (issue 22): shrink, grow, condense and bench print their plan
and write nothing (no output, no temporary file, no training checkpoint, no
results folder); the plan's numbers are the real run's (parameters and
tensor bytes of the written model, the steps, the cells), and the errors a
real run gives before its work, the dry run gives too."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from conftest import make_vit, write_plain
from safetensors import safe_open
from test_hub import gpt2_folder

# q/k norm: the heads are read from the weights (lg refuses work on heads it would assume).
TEACHER = dict(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10, qk_norm=True)
FAST = ["--batch-size", "16", "--subset", "64", "--test-subset", "32", "--device", "cpu"]


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def dry(lg, folder: Path, *args) -> dict:
    """The JSON plan of `lg ARGS --dry-run --json`, checking that nothing was written into `folder`."""
    before = listing(folder)
    result = lg(*args, "--dry-run", "--json")
    assert result.code == 0, result.stderr
    # Only the plan. Said before it: a foreign teacher's preprocessing, assumed; and, on a loaded machine, that
    # a step was too slow to time at the batch asked (step_memory.time_dry_run_step).
    said = [line for line in result.stderr.splitlines() if "states no preprocessing: lg assumes" not in line
            and not line.startswith("lg: dry run: a step of ")]
    assert said[0].startswith("dry run, nothing written: ")
    assert listing(folder) == before, "a dry run wrote something"
    return json.loads(result.stdout)


ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8}


def tensor_bytes(path: Path) -> int:
    """The bytes of every tensor in a written file or folder, from its headers."""
    total = 0
    for file in sorted(path.glob("*.safetensors")) if path.is_dir() else [path]:
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                tensor = f.get_slice(key)
                total += math.prod(tensor.get_shape()) * ITEMSIZE[tensor.get_dtype()]
    return total


def parameters_of(lg, path: Path) -> int:
    result = lg("inspect", path, "--json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["parameters"]["total"]


@pytest.fixture
def vit_file(tmp_path) -> Path:
    return write_plain(make_vit("qk-norm"), tmp_path / "vit.safetensors")  # heads read from the q/k norm


@pytest.mark.parametrize("args", [
    ["shrink", "--depth", "1", "--width", "32", "--heads", "2"],
    ["grow", "--depth", "3", "--method", "clone", "--shard-size", "60KB"],
    ["grow", "--depth", "3", "--width", "128", "--heads", "8", "--method", "auto-lg"],
    ["grow", "--depth", "4", "--method", "depth-upscale"],
    ["grow", "--depth", "3", "--method", "identity-insert"],
    ["grow", "--depth", "4", "--method", "stack"],
])
def test_a_resize_plan_is_what_the_real_run_writes(args, vit_file, tmp_path, lg):
    out = tmp_path / "out"
    command, *size = args
    plan = dry(lg, tmp_path, command, vit_file, *size, "-o", out)
    assert not out.exists()
    real = lg(command, vit_file, *size, "-o", out, "--json")
    assert real.code == 0, real.stderr
    report = json.loads(real.stdout)
    assert plan["target"] == report["target"] and plan["method"] == report["method"]
    assert plan["details"] == report["details"]  # what the method decided: the layer each copies, the seam
    assert plan["parameters"] == report["parameters"]
    assert plan["parameters"]["target"] == parameters_of(lg, out)
    assert plan["output"]["tensor_bytes"] == tensor_bytes(out)
    assert plan["output"]["form"] == ("shards" if out.is_dir() else "file")
    assert plan["output"]["safetensors_files"] == (len(list(out.glob("*.safetensors"))) if out.is_dir() else 1)
    assert plan["peak_memory_bytes"] > 0


def test_a_folder_plan_of_a_text_model(tmp_path, lg):
    source, _ = gpt2_folder(tmp_path, "gpt2")
    out = tmp_path / "out"
    plan = dry(lg, tmp_path, "grow", source, "--depth", "4", "-o", out)
    assert lg("grow", source, "--depth", "4", "-o", out).code == 0
    assert plan["output"]["form"] == "folder"
    assert plan["parameters"]["target"] == parameters_of(lg, out)
    assert plan["output"]["tensor_bytes"] == tensor_bytes(out)


def test_a_plan_from_a_learngene_neither_builds_nor_fits(tmp_path, lg):
    teacher = write_plain(make_vit("cls-token", **TEACHER), tmp_path / "teacher.safetensors")
    gene = tmp_path / "tleg.lg.safetensors"
    assert lg("condense", teacher, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2", *FAST,
              "-o", gene).code == 0
    out = tmp_path / "grown.safetensors"
    plan = dry(lg, tmp_path, "grow", gene, "--depth", "5", "-o", out)
    assert plan["target"]["depth"] == 5 and plan["source"]["learngene"] == "tleg"
    assert lg("grow", gene, "--depth", "5", "-o", out).code == 0
    assert plan["parameters"]["target"] == parameters_of(lg, out)
    assert plan["output"]["tensor_bytes"] == tensor_bytes(out)


@pytest.mark.parametrize("args, made", [
    (["shrink", "--width", "33"], False),        # not a whole number of heads
    (["grow", "--depth", "1"], False),           # grow cannot make the depth smaller
    (["shrink", "--depth", "1"], True),          # the output exists, no --force
])
def test_a_dry_run_refuses_what_the_real_run_refuses(args, made, vit_file, tmp_path, lg):
    out = tmp_path / "out.safetensors"
    if made:
        out.write_bytes(b"already here")
    command, *rest = args
    real = lg(command, vit_file, *rest, "-o", out)
    planned = lg(command, vit_file, *rest, "-o", out, "--dry-run")
    assert real.code == planned.code != 0
    # The same refusal; a hint it prints plans the same command (--dry-run: tests/test_resize_hints.py).
    assert planned.stderr.replace(" --dry-run", "") == real.stderr and len(planned.stderr.splitlines()) == 1
    assert planned.stdout == b""
    assert (out.read_bytes() == b"already here") if made else not out.exists()


def test_a_plan_needs_no_output_and_a_run_does(vit_file, tmp_path, lg, monkeypatch):
    """What shape --params buys, or how long a condense or distill takes,
    is asked without naming an output: the plan leaves the output out (its
    bytes and dtype stay). Without --dry-run, no output is one line."""
    monkeypatch.chdir(tmp_path)  # nothing may appear where the user stands
    plan = dry(lg, tmp_path, "shrink", vit_file, "--depth", "1")
    assert "path" not in plan["output"] and "form" not in plan["output"] and plan["output"]["tensor_bytes"] > 0
    said = lg("shrink", vit_file, "--params", "10K", "--dry-run")
    assert said.code == 0 and said.stdout == b""
    assert " at " not in said.stderr.splitlines()[-1] and "to stdout" not in said.stderr
    assert "bytes of float32 weights; the transforms' peak memory" in said.stderr
    assert "(three copies of the largest role stack), beyond what the process holds to read the model" in said.stderr
    teacher = write_plain(make_vit("cls-token", **TEACHER), tmp_path / "teacher.safetensors")
    student = tmp_path / "student.safetensors"
    assert lg("shrink", teacher, "--depth", "1", "-o", student).code == 0
    training = ["--data", "fashion-mnist-mini", "--steps", "6", *FAST]
    assert dry(lg, tmp_path, "condense", teacher, "--method", "tleg", *training)["steps"] == 6
    assert dry(lg, tmp_path, "distill", student, "--teacher", teacher, *training)["steps"] == 6
    benching = ["bench", teacher, "--sizes", "1x32", "--methods", "select", "--eval-every", "2", *training]
    assert dry(lg, tmp_path, *benching)["cells_to_run"] == 2  # select and random
    refused = lg("distill", student, "--teacher", teacher, *training, "--resume", "--dry-run")
    assert refused.code == 2 and refused.stderr == (
        "lg: error: with -o - (or no -o), name the training checkpoint: --checkpoint FILE\n")
    for args, message in ((["shrink", vit_file, "--depth", "1"],
                           "give an output: -o FILE, or -o - to write the checkpoint to stdout"),
                          (["condense", teacher, "--method", "tleg", *training],
                           "give an output: -o FILE, or -o - to write the learngene to stdout"),
                          (["distill", student, "--teacher", teacher, *training],
                           "give an output: -o OUT, or -o - to write the model to stdout"),
                          (benching, "give a results folder: -o DIR")):
        run = lg(*args)
        assert run.code == 2 and run.stderr == f"lg: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["student.safetensors", "teacher.safetensors",
                                                          "vit.safetensors"]


def test_a_slow_model_times_fewer_steps(monkeypatch):
    """Five timed steps, or fewer (one at least) once they took
    ENOUGH_TIMING_SECONDS: a real LLM's CPU step takes a minute."""
    from lgcli import train as train_module
    from lgcli.data import load_data
    from lgcli.train import TrainConfig, seconds_per_step

    data = load_data(subset=64, test_subset=8, seed=0)
    config = TrainConfig(steps=100, batch_size=8, progress=False)
    per_step, timed = seconds_per_step(make_vit("cls-token", **TEACHER), data.train, config)
    assert timed == 5 and per_step > 0
    clock = iter([0.0, 1.0, 13.0, 25.0, 37.0, 49.0])  # before any step; a first step of 1 s, then 12 s a step
    monkeypatch.setattr(train_module, "step_timer", lambda: next(clock))
    # Slow: timed at a batch of 4, not built at 8 (lgcli.step_memory.time_dry_run_step), and scaled to 8.
    assert seconds_per_step(make_vit("cls-token", **TEACHER), data.train, config) == (24.0, 1)


def test_a_condense_plan_times_steps_and_writes_nothing(tmp_path, lg):
    teacher = write_plain(make_vit("cls-token", **TEACHER), tmp_path / "teacher.safetensors")
    out = tmp_path / "gene.lg.safetensors"
    args = ["condense", teacher, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "40", *FAST,
            "-o", out, "--checkpoint-every", "10"]
    plan = dry(lg, tmp_path, *args)
    assert not out.exists() and not Path(f"{out}.train.pt").exists()
    assert plan["steps"] == 40 and plan["timed_steps"] == 5
    assert plan["estimated_seconds"] == pytest.approx(plan["seconds_per_step"] * 40) and plan["seconds_per_step"] > 0
    real = lg(*args[:-2], "--json")
    assert real.code == 0, real.stderr
    report = json.loads(real.stdout)
    assert plan["parameters"] == report["parameters"] and plan["auxiliary"] == report["auxiliary"]
    # An existing output refuses the dry run as it refuses the run.
    refused = lg(*args, "--dry-run")
    assert refused.code == 1 and refused.stderr == f"lg: error: {out}: exists; pass --force to overwrite it\n"


def test_a_bench_plan_counts_cells_and_steps_and_sees_saved_cells(tmp_path, lg):
    ancestry = write_plain(make_vit("cls-token", **TEACHER), tmp_path / "ancestry.safetensors")
    out = tmp_path / "bench"
    args = ["bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "1x32", "--methods", "select,tleg",
            "--steps", "4", "--eval-every", "2", "--condense-steps", "3", "--batch-size", "16", "--subset", "64",
            "--test-subset", "32", "--device", "cpu", "-o", out]
    plan = dry(lg, tmp_path, *args)
    assert not out.exists()
    assert (plan["cells"], plan["cells_to_run"], plan["cells_reused"]) == (3, 3, 0)  # select, tleg, random
    assert plan["steps"] == 3 * 4 + 3 and plan["condense"]["tleg"]["steps"] == 3
    assert plan["estimated_seconds"] > 0
    # Each timing says its batch: the probe's --batch-size, the learngene's --condense-batch-size.
    assert plan["probe"]["1x32"]["batch_size"] == 16 and plan["condense"]["tleg"]["batch_size"] == 64
    said = lg(*args, "--dry-run", "--condense-batch-size", "8").stderr
    assert "; probe batch 16, condense batch 8; " in said
    real = lg(*args)
    assert real.code == 0, real.stderr
    again = dry(lg, tmp_path, *args)
    assert (again["cells_to_run"], again["cells_reused"], again["steps"]) == (0, 3, 0)
    assert os.path.exists(out / "bench.json")
    # A size select cannot reach (deeper than the ancestry: select only
    # shrinks) is n/a in the run, and the plan neither counts its steps nor
    # runs it: the run then marks it n/a, as the plan said.
    deeper = [*args[:args.index("--sizes") + 1], "1x32,3x32", *args[args.index("--sizes") + 2:]]
    plan = dry(lg, tmp_path, *deeper)
    assert (plan["cells"], plan["cells_reused"], plan["cells_not_applicable"], plan["cells_to_run"]) == (6, 3, 1, 2)
    assert plan["steps"] == 2 * 4  # tleg and random at 3 x 32; the learngene is saved
    real = json.loads(lg(*deeper, "--json").stdout)
    assert [c["status"] for c in real["cells"] if c["method"] == "select" and c["size"] == "3x32"] == ["n/a"]
