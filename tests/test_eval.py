"""`lg eval`: scores, the init-quality probe's mechanics, and the example model's stated accuracy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch

from lgcli.api import save_model
from lgcli.data import FASHION_MNIST_DIR, load_data
from lgcli.evaluate import ProbeSettings, evaluate

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"
# The example model's test top-1 as stated in README.md and examples/README.md.
EXAMPLE_TOP1 = {"fashion-mnist": 88.42, "fashion-mnist-mini": 88.6}


def run_lg(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "lgcli", *map(str, args)], capture_output=True, text=True,
                          input=stdin)


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
    result = run_lg("eval", *checkpoints, "--steps", 4, "--eval-every", 2, "--batch-size", 16, "--subset", 64,
                    "--test-subset", 40, "--baseline", "random", "--json", "--plot", plot)
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
    assert any("head re-initialised (5 classes" in note for note in report["rows"][1]["notes"])
    assert "b5.safetensors: head re-initialised" in result.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_without_steps_the_scores_are_the_checkpoint_as_is(checkpoints):
    data = load_data(test_subset=50)
    report = evaluate([str(checkpoints[0])], data, ProbeSettings(progress=False))
    (row,) = report["rows"]
    assert [p["step"] for p in row["curve"]] == [0] and row["lr"] is None
    from lgcli.api import load_model
    from lgcli.train import evaluate_accuracy

    model, _ = load_model(checkpoints[0])
    direct = evaluate_accuracy(model, data.test)
    assert row["final"] == {k: direct[k] for k in ("top1", "top5", "loss")}


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


@pytest.mark.parametrize("args, message", [
    (["--lr-sweep", "1e-4,x", "--steps", "2"], "--lr-sweep takes comma-separated"),
    (["--lr-sweep", "1e-4"], "--lr-sweep needs --steps"),
    (["--baseline", "zeros"], "--baseline must be 'random'"),
    (["--plot", "curves.jpg"], "give a .png file name"),
])
def test_bad_options_are_one_line(checkpoints, args, message):
    result = run_lg("eval", checkpoints[0], "--test-subset", 10, *args)
    assert result.returncode == 1 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


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
