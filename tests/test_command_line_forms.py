"""Three edges of the command line: `--device` of lg shrink and grow is
checked as lg eval checks it (meta and mps were internal errors), `-o DIR/`
names a folder of shards of a timm ViT (it was refused as "one file"), and
bare `lg` is the help without an empty error line."""

from __future__ import annotations

import json

import pytest
import torch

import lgcli
from lgcli.checkpoint.destination import check_form, shard_size_below
from lgcli.checkpoint.writing import write_tensors
from lgcli.devices import concrete_device
from lgcli.errors import LgError, UsageError

from conftest import make_vit

@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A timm ViT whose file records its heads: about 220 KB of float32 weights."""
    path = tmp_path_factory.mktemp("forms") / "vit.safetensors"
    lgcli.save_model(make_vit(depth=4, embed_dim=64, num_heads=2), path)
    return path


# ---- 1. --device: as lg eval refuses it, before any work ----

NOT_A_DEVICE = {
    "meta": "lg: error: --device meta: not a device lg runs on (it holds no data: lg trains and scores real "
            "numbers); give auto, cpu, cuda or cuda:N",
    "mps": "lg: error: --device mps: not a device lg runs on; give auto, cpu, cuda or cuda:N",
}


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("device", sorted(NOT_A_DEVICE))
@pytest.mark.parametrize("command, depth", [("shrink", "2"), ("grow", "6")])
def test_a_device_lg_does_not_run_on_is_a_usage_error_before_any_work(source, lg, tmp_path, command, depth,
                                                                       device, dry_run):
    out = tmp_path / "dv.safetensors"
    done = lg(command, source, "--depth", depth, "--device", device, "-o", out, *(["--dry-run"] * dry_run))
    assert (done.code, done.stderr, done.stdout) == (2, NOT_A_DEVICE[device] + "\n", b"")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA refuses --device cuda")
@pytest.mark.parametrize("command, depth", [("shrink", "2"), ("grow", "6")])
def test_cuda_where_there_is_none_is_refused_as_lg_eval_refuses_it(source, lg, tmp_path, command, depth):
    done = lg(command, source, "--depth", depth, "--device", "cuda", "-o", tmp_path / "dv.safetensors", "--dry-run")
    assert (done.code, done.stderr) == (1, "lg: error: --device cuda: no CUDA device is available here "
                                           "(use --device cpu)\n")


def test_cuda_past_the_last_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert concrete_device("cuda:0") == "cuda:0"
    with pytest.raises(LgError, match=r"^--device cuda:1: this machine has 1 CUDA device \(cuda:0\)$"):
        concrete_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(LgError, match=r"^--device cuda:7: this machine has 2 CUDA devices \(cuda:0 to cuda:1\)$"):
        concrete_device("cuda:7")
    with pytest.raises(UsageError):
        concrete_device("meta")


def test_the_devices_lg_runs_on_still_resize(source, lg, tmp_path):
    done = lg("shrink", source, "--depth", "2", "--device", "cpu", "-o", tmp_path / "cpu.safetensors")
    assert done.code == 0, done.stderr
    assert lgcli.load(tmp_path / "cpu.safetensors").spec.depth == 2


# ---- 2. -o DIR/: a folder of shards; one file takes a file name ----

def test_the_form_check_takes_a_folder_name_for_shards():
    check_form("vsh/", folder=False, shards=3, shard_size=100_000)  # shards are a folder
    check_form("vsh", folder=False, shards=3, shard_size=100_000)
    with pytest.raises(LgError, match=r"^vsh.safetensors: at --shard-size 100,000 bytes the output is 3 shards, "
                                      r"which lg writes as a folder: give a folder name"):
        check_form("vsh.safetensors", folder=False, shards=3, shard_size=100_000)


def test_a_folder_name_for_one_file_says_how_to_get_a_folder():
    with pytest.raises(LgError) as refused:
        check_form("one/", folder=False, shard_size=5 * 10**9, weight_bytes=1_210_132)
    assert str(refused.value) == ("one/: names a folder; this model is one file: give a file name for the output "
                                  "(-o one.safetensors), or add --shard-size 605KB to write it as a folder of shards")
    # A caller without --shard-size (lg distill), or weights that cannot be split: no such hint.
    with pytest.raises(LgError) as refused:
        check_form("one/", folder=False, weight_bytes=1_210_132)
    assert str(refused.value) == ("one/: names a folder; this model is one file: give a file name for the output "
                                  "(-o one.safetensors)")
    assert [shard_size_below(n) for n in (1_210_132, 3_000_000_001, 1999, 1)] == ["605KB", "1GB", "999", "1"]


def test_the_writer_puts_shards_in_the_folder_a_trailing_slash_names(tmp_path):
    tensors = [(f"t{i}", torch.full((100,), float(i))) for i in range(4)]
    entries = [(name, t.dtype, tuple(t.shape)) for name, t in tensors]
    write_tensors(f"{tmp_path / 'vsh'}/", entries, iter(tensors), {}, shard_size=800)
    assert sorted(p.name for p in (tmp_path / "vsh").iterdir()) == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    with pytest.raises(LgError, match="add --shard-size 800 to write it as a folder of shards"):
        write_tensors(f"{tmp_path / 'one'}/", entries, iter(tensors), {}, shard_size=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vsh"]


def test_a_sharded_timm_output_goes_to_the_folder_a_trailing_slash_names(source, lg, tmp_path):
    done = lg("shrink", source, "--depth", "3", "--shard-size", "50KB", "-o", f"{tmp_path / 'vsh'}/")
    assert done.code == 0, done.stderr
    shards = sorted(p.name for p in (tmp_path / "vsh").iterdir() if p.name.startswith("model-"))
    assert len(shards) > 1 and (tmp_path / "vsh" / "model.safetensors.index.json").is_file()
    inspected = lg("inspect", tmp_path / "vsh", "--json")
    assert inspected.code == 0, inspected.stderr
    assert json.loads(inspected.stdout)["depth"] == 3
    model = lgcli.load_model(tmp_path / "vsh")[0]  # as the load line printed after the write says
    assert len(model.blocks) == 3


def test_a_folder_name_for_one_timm_file_is_refused_with_a_hint_that_runs(source, lg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for dry_run in ([], ["--dry-run"]):  # the plan refuses it as the run does
        done = lg("shrink", source, "--depth", "3", "-o", "one/", *dry_run)
        assert done.code == 1 and done.stderr.startswith(
            "lg: error: one/: names a folder; this model is one file: give a file name for the output "
            "(-o one.safetensors), or add --shard-size "), done.stderr
        assert list(tmp_path.iterdir()) == []
    size = done.stderr.split("--shard-size ")[1].split()[0]
    followed = lg("shrink", source, "--depth", "3", "-o", "one/", "--shard-size", size)
    assert followed.code == 0, followed.stderr
    assert (tmp_path / "one" / "model.safetensors.index.json").is_file()


# ---- 3. bare lg: the help, no empty error ----

def test_bare_lg_prints_the_help_and_exits_2_without_an_error_line(lg):
    done = lg()
    assert done.code == 2 and done.stdout == b""  # stdout carries data only
    assert "Usage: lg [OPTIONS] COMMAND [ARGS]..." in done.stderr
    assert "shrink" in done.stderr and "lg: error" not in done.stderr


def test_bare_lg_with_debug_only_is_bare_lg(lg, monkeypatch):
    monkeypatch.setenv("LG_DEBUG", "")  # --debug sets it: restored after the test
    done = lg("--debug")
    assert done.code == 2 and "Usage: lg" in done.stderr and "lg: error" not in done.stderr
