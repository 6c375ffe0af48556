"""`lg eval`: scores, the init-quality probe's mechanics, and the example model's stated accuracy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import timm
import torch

from lgcli.api import save_model
from lgcli.data import FASHION_MNIST_DIR, load_data
from lgcli.errors import LgError
from lgcli.evaluate import ProbeSettings, evaluate

from conftest import run_lg_inproc

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"
# The example model's test top-1 as stated in README.md and examples/README.md.
EXAMPLE_TOP1 = {"fashion-mnist": 88.42, "fashion-mnist-mini": 88.6}


def run_lg(*args, stdin=None):
    """lg run in this process, its output as text."""
    done = run_lg_inproc(*args, stdin=stdin.encode() if stdin else None)
    return subprocess.CompletedProcess(args, done.code, done.stdout.decode(), done.stderr)


def tiny(path: Path, classes: int = 10, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = timm.create_model("vit_tiny_patch16_224", depth=2, embed_dim=32, num_heads=2, patch_size=7,
                              img_size=28, in_chans=1, num_classes=classes)
    save_model(model, path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    return tiny(folder / "a.safetensors"), tiny(folder / "b5.safetensors", classes=5, seed=1)


def test_probe_rows_steps_json_and_plot(tmp_path, checkpoints):
    plot = tmp_path / "curves.png"
    # --data named: b5 has 5 classes, so the default data would be refused (it probes with a new head here)
    result = run_lg("eval", *checkpoints, "--data", "fashion-mnist-mini", "--steps", 4, "--eval-every", 2,
                    "--batch-size", 16, "--subset", 64, "--test-subset", 40, "--baseline", "random", "--json",
                    "--plot", plot)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # stdout is the JSON and nothing else
    assert report["version"] == 1
    assert report["data"] == {"name": "fashion-mnist-mini", "train": 64, "test": 40, "classes": 10, "channels": 1,
                              "test_split": report["data"]["test_split"]}
    assert report["settings"]["steps"] == 4 and report["settings"]["lr"] == 3e-4
    assert report["settings"]["warmup"] == 0  # 10 % of 4 steps
    # Both checkpoints share one architecture (only the head differs): one random row.
    assert [row["name"] for row in report["rows"]] == ["a.safetensors", "b5.safetensors", "random"]
    for row in report["rows"]:
        assert [point["step"] for point in row["curve"]] == [0, 2, 4]
        assert set(row) >= {"name", "source", "architecture", "notes", "lr", "instinct", "final", "mean_top1"}
        assert row["instinct"] == {k: row["curve"][0][k] for k in ("top1", "top5", "loss")}
        assert row["final"] == {k: row["curve"][-1][k] for k in ("top1", "top5", "loss")}
        assert all(0 <= p["top1"] <= p["top5"] <= 100 and p["loss"] > 0 for p in row["curve"])
        assert "train_loss" not in row["curve"][0] and all("train_loss" in p for p in row["curve"][1:])
        assert row["architecture"]["depth"] == 2 and row["architecture"]["num_classes"] == 10
    assert report["rows"][2]["source"] == "random"
    # Every row is measured against the random row's final top-1, as its own curve says.
    from lgcli.evaluate import steps_to_reach

    target = report["rows"][2]["final"]["top1"]
    for row in report["rows"]:
        assert row["baseline"] == "random"
        expected = steps_to_reach(row["curve"], target)
        assert row["steps_to_random_final"] == (None if expected is None else round(expected, 1))
    assert report["rows"][2]["steps_to_random_final"] <= 4
    assert any("head re-initialised (5 classes" in note for note in report["rows"][1]["notes"])
    assert "b5.safetensors: head re-initialised" in result.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_without_steps_the_scores_are_the_checkpoint_as_is(checkpoints):
    data = load_data(test_subset=50)
    report = evaluate([str(checkpoints[0])], data, ProbeSettings(progress=False))
    (row,) = report["rows"]
    assert [p["step"] for p in row["curve"]] == [0] and row["lr"] is None
    from lgcli.api import load_model
    from lgcli.accuracy import evaluate_accuracy

    model, _ = load_model(checkpoints[0])
    direct = evaluate_accuracy(model, data.test)
    assert row["final"] == {k: direct[k] for k in ("top1", "top5", "loss")}


def test_a_long_first_scoring_says_how_long_and_so_does_every_later_one(checkpoints, monkeypatch):
    """A real model's test split on a CPU takes minutes: a checkpoint's
    first scoring whose first batch says the pass is long says so, with the
    --test-subset that takes about ANNOUNCE_PASS_ABOVE_SECONDS, once per
    checkpoint; then every later scoring of its curve, at every rate, says
    how long the whole pass takes, so no pass is silent."""
    from lgcli import pace

    data = load_data(subset=48, test_subset=300)
    settings = ProbeSettings(steps=2, batch_size=16, eval_every=1, lr_sweep=[1e-4, 3e-3], progress=False)
    said = []
    evaluate([str(checkpoints[0])], data, settings, notify=said.append)
    assert not any("scoring" in line for line in said)
    clock = iter(range(0, 100000, 10))  # every reading 10 s after the last: a batch of 256 takes 10 s
    monkeypatch.setattr(pace, "clock", lambda: float(next(clock)))
    monkeypatch.setattr(pace, "ANNOUNCE_PASS_ABOVE_SECONDS", 1.0)
    said.clear()
    evaluate([str(checkpoints[0])], data, settings, notify=said.append)
    # The first batch (256 images) took 10 s, the 44 left about 2 s: 12 s a pass.
    assert [line for line in said if "scoring" in line] == [
        "a.safetensors: scoring on 300 test images: about 2 s more (--test-subset 25: about 1 s a pass)",
        "a.safetensors: scoring at step 1 (lr 0.0001): about 12 s",
        "a.safetensors: scoring at step 2 (lr 0.0001): about 12 s",
        "a.safetensors: scoring at step 0 (lr 0.003): about 12 s",
        "a.safetensors: scoring at step 1 (lr 0.003): about 12 s",
        "a.safetensors: scoring at step 2 (lr 0.003): about 12 s"]


def test_same_settings_same_figures_and_sweep_reports_the_best(checkpoints):
    data = load_data(subset=48, test_subset=30)
    settings = ProbeSettings(steps=3, batch_size=16, lr_sweep=[1e-4, 3e-3], progress=False)
    first = evaluate([str(checkpoints[0])], data, settings)
    again = evaluate([str(checkpoints[0])], data, settings)
    assert first["rows"] == again["rows"]  # seeded: the probe is reproducible
    (row,) = first["rows"]
    assert [run["lr"] for run in row["sweep"]] == [1e-4, 3e-3]
    best = max(row["sweep"], key=lambda run: (run["final"]["top1"], -run["final"]["loss"]))
    assert row["lr"] == best["lr"] and row["final"] == best["final"]


def test_table_is_printed_to_stdout(checkpoints):
    result = run_lg("eval", checkpoints[0], "--test-subset", 30)
    assert result.returncode == 0, result.stderr
    assert "a.safetensors" in result.stdout and "top-1" in result.stdout


@pytest.mark.parametrize("args, message, code", [
    (["--lr-sweep", "1e-4,x", "--steps", "2"], "--lr-sweep takes comma-separated", 2),  # usage mistakes: 2
    (["--lr-sweep", "1e-4"], "--lr-sweep needs --steps", 2),
    (["--baseline", "zeros"], "--baseline must be 'random'", 2),
    (["--plot", "curves.jpg"], "give a .png, .pdf or .svg file name", 2),
])
def test_bad_options_are_one_line(checkpoints, args, message, code):
    result = run_lg("eval", checkpoints[0], "--test-subset", 10, *args)
    assert result.returncode == code and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_existing_plot_is_refused_before_any_work(tmp_path, checkpoints):
    plot = tmp_path / "curves.png"
    plot.write_bytes(b"keep me")
    result = run_lg("eval", checkpoints[0], "--steps", 1000, "--plot", plot)
    assert result.returncode == 1 and "--force" in result.stderr and plot.read_bytes() == b"keep me"


def example_top1(data_name: str) -> float:
    result = run_lg("eval", EXAMPLE, "--data", data_name, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["rows"][0]["final"]["top1"]


@pytest.mark.skipif(not EXAMPLE.exists(), reason="example model not built")
def test_example_model_reproduces_its_stated_accuracy_on_the_embedded_test_split():
    assert example_top1("fashion-mnist-mini") == pytest.approx(EXAMPLE_TOP1["fashion-mnist-mini"], abs=0.5)


@pytest.mark.slow
@pytest.mark.skipif(not (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").exists() or not EXAMPLE.exists(),
                    reason="dataset-fashion-mnist not installed")
def test_example_model_reproduces_its_stated_accuracy_on_the_official_test_set():
    assert example_top1("fashion-mnist") == pytest.approx(EXAMPLE_TOP1["fashion-mnist"], abs=0.5)


# ---- settings are checked where they are made, with the flag's name ----

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=NAN), "--lr must be a positive finite number, got nan"),
    (dict(lr=INF), "--lr must be a positive finite number, got inf"),
    (dict(lr=0.0), "--lr must be a positive finite number, got 0.0"),
    (dict(lr=-1e-3), "--lr must be a positive finite number, got -0.001"),
    (dict(lr="fast"), "--lr must be a positive finite number, got 'fast'"),
    (dict(lr_sweep=[1e-4, NAN]), "--lr-sweep: each learning rate must be a positive finite number, got nan"),
    (dict(lr_sweep=[0.0]), "--lr-sweep: each learning rate must be a positive finite number, got 0.0"),
    (dict(weight_decay=NAN), "--weight-decay must be a finite number >= 0, got nan"),
    (dict(weight_decay=-0.1), "--weight-decay must be a finite number >= 0, got -0.1"),
    (dict(batch_size=0), "--batch-size must be a whole number >= 1, got 0"),
    (dict(label_smoothing=1.0), "--label-smoothing must be a number in [0, 1), got 1.0"),
    (dict(label_smoothing=NAN), "--label-smoothing must be a number in [0, 1), got nan"),
    (dict(steps=-1), "--steps must be a whole number >= 0, got -1"),
    (dict(seed=2**32), "--seed must be a whole number in [0, 4294967295], got 4294967296"),
    (dict(seed=-1), "--seed must be a whole number in [0, 4294967295], got -1"),
])
def test_probe_settings_refuse_bad_values(kwargs, message):
    with pytest.raises(LgError) as caught:
        ProbeSettings(**kwargs)
    assert str(caught.value) == message


def test_evaluate_rechecks_settings_changed_after_construction(checkpoints):
    settings = ProbeSettings(steps=1, progress=False)
    settings.lr = NAN
    with pytest.raises(LgError, match="^--lr must be a positive finite number, got nan$"):
        evaluate([str(checkpoints[0])], load_data(test_subset=10), settings)


@pytest.mark.parametrize("kwargs, message", [
    (dict(steps=10, lr=NAN), "--lr must be a positive finite number, got nan"),
    (dict(steps=10, lr=-INF), "--lr must be a positive finite number, got -inf"),
    (dict(steps=10, weight_decay=INF), "--weight-decay must be a finite number >= 0, got inf"),
    (dict(steps=10, batch_size=0), "--batch-size must be a whole number >= 1, got 0"),
    (dict(steps=0), "--steps must be a whole number >= 1, got 0"),
    (dict(epochs=NAN), "--epochs must be a positive finite number, got nan"),
    (dict(steps=10, seed=2**40), "--seed must be a whole number in [0, 4294967295], got 1099511627776"),
])
def test_condense_settings_refuse_bad_values(kwargs, message):
    from lgcli.condense import CondenseSettings

    with pytest.raises(LgError) as caught:
        CondenseSettings(**kwargs)
    assert str(caught.value) == message


def test_condense_epochs_that_overflow_are_refused():
    from lgcli.condense import CondenseSettings

    with pytest.raises(LgError, match="--epochs 1e\\+308 makes more optimiser steps than any run can take"):
        CondenseSettings(epochs=1e308, batch_size=1).total_steps(4000)


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=NAN), "--lr must be a positive finite number, got nan"),
    (dict(lr=0), "--lr must be a positive finite number, got 0"),
    (dict(weight_decay=-1.0), "--weight-decay must be a finite number >= 0, got -1.0"),
    (dict(label_smoothing=1.5), "--label-smoothing must be a number in [0, 1), got 1.5"),
    (dict(grad_clip=NAN), "gradient clipping must be a positive finite number, got nan"),
    (dict(batch_size=0), "--batch-size must be a whole number >= 1, got 0"),
    (dict(seed=-5), "--seed must be a whole number in [0, 4294967295], got -5"),
])
def test_train_config_refuses_bad_values_before_the_optimiser_sees_them(kwargs, message):
    from lgcli.train import TrainConfig, train

    with pytest.raises(LgError) as caught:
        TrainConfig(steps=1, **kwargs)
    assert str(caught.value) == message
    config = TrainConfig(steps=1, batch_size=8, progress=False)
    for name, value in kwargs.items():
        setattr(config, name, value)  # changed after construction: train() checks again
    with pytest.raises(LgError) as caught:
        train(timm.create_model("vit_tiny_patch16_224", depth=1, embed_dim=16, num_heads=1, patch_size=7,
                                img_size=28, in_chans=1, num_classes=10), load_data(subset=16).train, config)
    assert str(caught.value) == message


def test_the_largest_seed_trains_and_evaluates(checkpoints):
    report = evaluate([str(checkpoints[0])], load_data(subset=16, test_subset=10, seed=2**32 - 1),
                      ProbeSettings(steps=1, batch_size=8, seed=2**32 - 1, progress=False))
    assert report["rows"][0]["curve"][-1]["step"] == 1


def test_cli_non_finite_learning_rate_is_one_line(checkpoints):
    result = run_lg("eval", checkpoints[0], "--steps", 1, "--lr", "nan")
    assert result.returncode in (1, 2) and result.stdout == ""
    assert result.stderr.strip() == "lg: error: --lr must be a positive finite number, got nan"


def test_steps_to_reach_interpolates_on_a_hand_made_curve():
    from lgcli.evaluate import add_steps_to_baseline, steps_to_reach

    curve = [{"step": 0, "top1": 10.0}, {"step": 100, "top1": 50.0}, {"step": 200, "top1": 70.0},
             {"step": 300, "top1": 65.0}]
    assert steps_to_reach(curve, 60.0) == 150.0          # halfway between 50 at 100 and 70 at 200
    assert steps_to_reach(curve, 50.0) == 100.0          # reached exactly on a point
    assert steps_to_reach(curve, 5.0) == 0.0             # already there at the start
    assert steps_to_reach(curve, 70.5) is None           # never
    assert steps_to_reach(curve[:3], 30.0) == 50.0

    arch = {"depth": 2, "width": 32}
    random = {"name": "random", "source": "random", "architecture": arch, "final": {"top1": 60.0},
              "curve": [{"step": 0, "top1": 10.0}, {"step": 100, "top1": 40.0}, {"step": 200, "top1": 60.0}]}
    fast = {"name": "fast", "source": "a.safetensors", "architecture": arch, "final": {"top1": 70.0},
            "curve": curve[:3]}
    slow = {"name": "slow", "source": "b.safetensors", "architecture": arch, "final": {"top1": 55.0},
            "curve": [{"step": 0, "top1": 10.0}, {"step": 200, "top1": 55.0}]}
    other = {"name": "other", "source": "c.safetensors", "architecture": {"depth": 3, "width": 32},
             "final": {"top1": 1.0}, "curve": [{"step": 0, "top1": 1.0}]}
    add_steps_to_baseline([fast, slow, random, other])
    assert random["steps_to_random_final"] == 200.0 and random["speedup"] == 1.0
    assert fast["steps_to_random_final"] == 150.0 and fast["speedup"] == round(200 / 150, 2)
    assert slow["steps_to_random_final"] is None and slow["speedup"] is None
    assert "steps_to_random_final" not in other            # no baseline of its architecture

    # Random at its final from step 0 (its curve falls back to it): a row
    # that gets there later has steps but no ratio, not a 0.00x speed-up.
    flat = {**random, "final": {"top1": 10.0}, "curve": [{"step": 0, "top1": 10.0}, {"step": 2, "top1": 10.0}]}
    late = {**fast, "curve": [{"step": 0, "top1": 5.0}, {"step": 2, "top1": 12.0}]}
    add_steps_to_baseline([late, flat])
    assert late["steps_to_random_final"] == round(2 * 5 / 7, 1) and late["speedup"] is None


def _scored_without_steps(model: torch.nn.Module, settings: ProbeSettings) -> dict:
    """`lg eval --steps 0`'s probe of a caller's live model (as lg bench calls it)."""
    from lgcli.evaluate import Candidate, architecture_of, probe_row

    candidate = Candidate("live", model, "live", architecture_of(model))
    return probe_row(candidate, load_data(test_subset=20), settings)


def _caller_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", depth=2, embed_dim=32, num_heads=2, patch_size=7,
                              img_size=28, in_chans=1, num_classes=10)
    model.train()
    model.head.eval()  # modes of the caller's own: a frozen head under a training body
    return model


def test_scoring_without_steps_leaves_the_callers_model_as_it_was():
    """The model is scored itself (no copy), so every module keeps its own
    train or eval mode, every parameter stays the same tensor with the same
    values, and the figures are those of the model in eval mode."""
    model = _caller_model()
    modes = [module.training for module in model.modules()]
    before = {name: (param, param.data_ptr(), param.detach().clone()) for name, param in model.named_parameters()}
    row = _scored_without_steps(model, ProbeSettings(device="cpu", progress=False))
    assert [module.training for module in model.modules()] == modes
    assert model.training and not model.head.training
    for name, param in model.named_parameters():
        same, pointer, values = before[name]
        assert param is same and param.data_ptr() == pointer and param.device.type == "cpu", name
        assert torch.equal(param, values), name
    from lgcli.accuracy import evaluate_accuracy

    direct = evaluate_accuracy(model.eval(), load_data(test_subset=20).test)
    assert row["final"] == {k: direct[k] for k in ("top1", "top5", "loss")}


def test_scoring_without_steps_on_another_device_moves_the_model_back(monkeypatch):
    """Scoring moves the model to the settings' device; the caller's model is
    sent back to the device it was on afterwards, also when scoring fails.
    The move is recorded, not made, so this runs on a machine without CUDA
    (the test below makes it for real where there is one)."""
    from lgcli import evaluate as evaluate_module

    model = _caller_model()
    moves = []
    monkeypatch.setattr(model, "to", lambda device: moves.append(str(device)) or model, raising=False)

    def scored_on_the_device(scored, data, settings, examples=None, pace=None):
        scored.to(settings.device).eval()  # what evaluate_accuracy does
        return {"top1": 50.0, "top5": 90.0, "loss": 1.0}

    monkeypatch.setattr(evaluate_module, "score", scored_on_the_device)
    _scored_without_steps(model, ProbeSettings(device="cuda:1", progress=False))
    assert moves == ["cuda:1", "cpu"]
    assert model.training and not model.head.training

    def failing(scored, data, settings, examples=None, pace=None):
        scored.to(settings.device).eval()
        raise RuntimeError("out of memory")

    moves.clear()
    monkeypatch.setattr(evaluate_module, "score", failing)
    with pytest.raises(RuntimeError):
        _scored_without_steps(model, ProbeSettings(device="cuda:1", progress=False))
    assert moves == ["cuda:1", "cpu"]
    assert model.training and not model.head.training


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_scoring_without_steps_on_cuda_leaves_a_cpu_model_on_the_cpu():
    model = _caller_model()
    params = list(model.parameters())
    _scored_without_steps(model, ProbeSettings(device="cuda", progress=False))
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(p.device.type == "cpu" for p in model.buffers())
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert model.training and not model.head.training
