"""A dry run is a plan in seconds: it times a small batch and scales to the
one asked when a step of that is slow to time (a real LLM's default batch
took minutes and nearly all the memory), and says so; interrupted, it gives
no advice about saving a run. The hint after a resize calls lg eval's
100-step probe long from an estimate of its seconds on this CPU
(lgcli.pace.probe_seconds), not from a fixed size."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import torch
from conftest import SIGTERM_AT_FIRST_STEP, make_vit, write_plain
from test_step_memory import POSITIONS, VOCABULARY, tiny_llama

import lgcli
import lgcli.pace
from lgcli import step_memory
from lgcli import train as training
from lgcli.text import TokenWindows
from lgcli.train import TrainConfig, seconds_per_step


@pytest.fixture
def windows():
    inputs = torch.randint(VOCABULARY, (32, POSITIONS), generator=torch.Generator().manual_seed(0))
    return TokenWindows(inputs, inputs.clone())


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(step_memory, "_said", set())


def steps_costing(monkeypatch, seconds_of_batch) -> list[int]:
    """The batches the dry run trains, each step taking `seconds_of_batch(batch)` on a fake clock."""
    batches: list[int] = []
    real_train = training.train
    now = [0.0]

    def train(model, data, config, **kw):
        batches.append(config.batch_size)
        return real_train(model, data, config, **kw)

    def tick() -> float:
        now[0] += seconds_of_batch(batches[-1])
        return now[0]

    monkeypatch.setattr(training, "train", train)
    monkeypatch.setattr(training, "step_timer", tick)
    return batches


def test_a_slow_step_is_timed_at_a_small_batch_and_scaled(monkeypatch, windows, capsys):
    """SmolLM2's step of 64 windows beside its teacher takes minutes on a
    CPU: the dry run times 4, scales, and says it did."""
    batches = steps_costing(monkeypatch, lambda batch: 12.0 * batch / 4)  # 12 s a step of 4: 24 s one of 8
    timing: dict = {}
    per_step, timed = seconds_per_step(tiny_llama(), windows, TrainConfig(steps=50, batch_size=32, progress=False),
                                       timing=timing)
    assert set(batches) == {4} and timing == {"batch_size": 4}
    assert per_step == pytest.approx(96.0) and timed >= 1  # in proportion: the most a step of 32 can take
    said = capsys.readouterr().err.splitlines()
    assert said == ["lg: dry run: a step of 32 would take about 2 min; timed at a batch of 4, scaled to 32"]


def test_a_step_with_a_fixed_part_is_scaled_through_two_batches(monkeypatch, windows, capsys):
    """A step's fixed part (the optimiser's update) does not grow with the
    batch: scaled in proportion from 4 alone, a small model's step of 64 was
    six times what it took. A second batch, 8, is timed when not slow."""
    batches = steps_costing(monkeypatch, lambda batch: 1.0 + 0.25 * batch)  # 2 s a step of 4, 3 s one of 8
    timing: dict = {}
    per_step, _ = seconds_per_step(tiny_llama(), windows, TrainConfig(steps=50, batch_size=32, progress=False),
                                   timing=timing)
    assert sorted(set(batches)) == [4, 8] and timing == {"batch_size": 8}
    assert per_step == pytest.approx(9.0)  # 1 + 0.25 x 32, not 12 (3 s x 32 / 8)
    assert capsys.readouterr().err.endswith("; timed at a batch of 8, scaled to 32\n")


def test_a_quick_step_is_timed_at_the_batch_asked(monkeypatch, windows, capsys):
    """A small model's step is quick: the batch doubles up to the one asked,
    which is timed as it is, and nothing is scaled or said."""
    batches = steps_costing(monkeypatch, lambda batch: 0.01 + 0.001 * batch)
    timing: dict = {}
    per_step, timed = seconds_per_step(tiny_llama(), windows, TrainConfig(steps=50, batch_size=32, progress=False),
                                       timing=timing)
    assert sorted(set(batches)) == [4, 8, 16, 32] and batches[-1] == 32 and timing == {"batch_size": 32}
    assert (per_step, timed) == (pytest.approx(0.042), 5) and capsys.readouterr().err == ""


def test_the_scaled_time_follows_the_steps_timed_on_the_way():
    """Two batches timed: the line through them (a fixed part and a part per
    example), kept between the last time and that time in proportion."""
    assert step_memory.scaled_step([(4, 1.0)], 64) == 16.0
    assert step_memory.scaled_step([(4, 1.0), (8, 1.5)], 64) == pytest.approx(1.5 + 0.125 * 56)
    assert step_memory.scaled_step([(4, 1.0), (8, 0.9)], 64) == 0.9  # noise: no faster than the last
    assert step_memory.scaled_step([(4, 0.1), (8, 1.0)], 64) == 8.0  # no more than in proportion


def test_a_distill_plan_names_the_batch_it_timed(tmp_path, lg, monkeypatch):
    vit = dict(depth=1, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10,
               qk_norm=True)
    teacher = write_plain(make_vit("cls-token", **vit), tmp_path / "teacher.safetensors")
    student = write_plain(make_vit("cls-token", **vit), tmp_path / "student.safetensors")
    args = ["distill", student, "--teacher", teacher, "--data", "fashion-mnist-mini", "--steps", "20",
            "--batch-size", "16", "--subset", "64", "--test-subset", "16", "--device", "cpu", "--dry-run", "--json"]
    monkeypatch.setattr(step_memory, "QUICK_STEP_SECONDS", 0.0)  # every step counts as slow to time, and
    monkeypatch.setattr(step_memory, "SECOND_STEP_SECONDS", 0.0)  # too slow for a second batch
    done = lg(*args)
    assert done.code == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["timed_batch_size"] == 4 and plan["batch_size"] == 16
    assert "; timed at a batch of 4, scaled to 16" in done.stderr
    # The plan's line says its step time was scaled, not measured at the batch asked.
    assert f"(from 1 step timed at batch 4, scaled to batch 16: {plan['seconds_per_step']:.3f} s a step)" in done.stderr
    assert plan["estimated_seconds"] == pytest.approx(plan["seconds_per_step"] * 20)


@pytest.mark.parametrize("command", ["distill", "condense"])
def test_an_interrupted_dry_run_gives_no_advice_about_saving_the_run(tmp_path, command):
    """A plan has no run to save or resume: --checkpoint-every means nothing to it."""
    vit = dict(depth=1, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10,
               qk_norm=True)
    teacher = write_plain(make_vit("cls-token", **vit), tmp_path / "teacher.safetensors")
    what = [str(write_plain(make_vit("cls-token", **vit), tmp_path / "student.safetensors")), "--teacher",
            str(teacher)] if command == "distill" else [str(teacher), "--method", "tleg"]
    args = [command, *what, "--data", "fashion-mnist-mini", "--steps", "4", "--batch-size", "8", "--subset", "32",
            "--test-subset", "10", "--device", "cpu", "--dry-run"]
    done = subprocess.run([sys.executable, "-c", SIGTERM_AT_FIRST_STEP, *args], capture_output=True, text=True)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.splitlines()[-1] == "lg: error: interrupted (SIGTERM); nothing written"


# parameters x input pixels (what lgcli.resize gives pace.probe_seconds)
DINOV2_S_4_LAYERS_112_PX = 9.2e10  # a 100-step probe took 3.99 s a step on 2 cores: over 6 minutes
EXAMPLE_VIT = 1.2e6 * 28 * 28  # probes in seconds


@pytest.mark.parametrize("threads, work, slow", [
    (2, DINOV2_S_4_LAYERS_112_PX, True), (2, EXAMPLE_VIT, False), (1, EXAMPLE_VIT, False),
    (2, 2.5e10, False), (1, 2.5e10, True),  # about 2 min on 2 cores, 4 on one
    (64, DINOV2_S_4_LAYERS_112_PX, False)])  # a big machine probes it in seconds
def test_the_probe_is_long_when_its_seconds_on_this_cpu_are(monkeypatch, threads, work, slow):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    assert (work > lgcli.pace.slow_cpu_probe()) is slow
    assert (lgcli.pace.probe_seconds(work) > lgcli.pace.SLOW_PROBE_SECONDS) is slow


def test_the_hint_after_a_resize_reads_the_cpu_rate(tmp_path, lg, monkeypatch):
    """The hint follows the rate: a CPU slow enough makes even a tiny model's
    probe long, and its 10-class head is then scored as it is (--steps 0)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    src = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1,
                              num_classes=10), src)
    tail = "--data fashion-mnist-mini --steps"
    done = lg("shrink", src, "--depth", "1", "-o", tmp_path / "fast.safetensors")
    assert done.code == 0 and done.stderr.splitlines()[-1].endswith(f"{tail} 100"), done.stderr
    monkeypatch.setattr(lgcli.pace, "PROBE_WORK_PER_CORE_SECOND", 1.0)
    done = lg("shrink", src, "--depth", "1", "-o", tmp_path / "slow.safetensors")
    assert done.code == 0 and done.stderr.splitlines()[-1].endswith(f"{tail} 0"), done.stderr
