"""`lg bench --dry-run` counts the data-aware resize cells' calibration
passes: it said "about 0 s" for a bench whose block ablation took 18 s. Each
cell's passes are counted as `lg shrink --calibrate --dry-run` counts them,
and one batch is timed, once, for all of them; their time is in the plan's
estimate. Nothing is trained or measured: a plan only."""

from __future__ import annotations

import json
import time

import pytest
import timm
import torch

import lgcli
from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.calibrated_shrink import BENCH_ROW
from lgcli.evaluate import ProbeSettings

IMAGES = "fashion-mnist-mini"
# Greedy block ablation of 4 blocks to 2 scores 4 blocks, then 3, each round with a pass of the full model and,
# after the first, one of the model without the removed block: 5 + 5 with blocks skipped, after the pass that
# gathers the statistics. Activation importance is that one pass, and so is block ablation where the depth stays
# (it selects the width uniformly); the calibrated default at 2 x 32 is both steps, each pass counted as one of
# the whole ancestry.
ABLATION = 1 + (1 + 4) + (1 + 1 + 3)
PASSES = {"block-ablation@2x64": ABLATION, "block-ablation@4x32": 1, "block-ablation@2x32": ABLATION,
          "activation@2x64": 1, "activation@4x32": 1, "activation@2x32": 1,
          f"{BENCH_ROW}@2x64": ABLATION, f"{BENCH_ROW}@4x32": 1, f"{BENCH_ROW}@2x32": ABLATION + 1}
SKIPPING = {name: 10 if passes > 1 else 0 for name, passes in PASSES.items()}
SLEEP = 0.02  # seconds added to each calibration batch, so that the timed batch is not a rounded 0


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", depth=4, embed_dim=64, num_heads=2, patch_size=7, img_size=28,
                              in_chans=1, num_classes=10)
    path = tmp_path_factory.mktemp("ancestry") / "ancestry.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


@pytest.fixture
def slow_batches(monkeypatch):
    """Every calibration batch takes SLEEP seconds more (the timed one included)."""
    import lgcli.calibration

    forward = lgcli.calibration._forward

    def slow(model, inputs, unit):
        time.sleep(SLEEP)
        return forward(model, inputs, unit)

    monkeypatch.setattr(lgcli.calibration, "_forward", slow)


def test_a_dry_run_counts_and_times_the_calibration_passes(lg, ancestry, slow_batches):
    """Every data-aware cell's passes are the shrink's count, and the estimate holds their time."""
    result = lg("bench", ancestry, "--data", IMAGES, "--sizes", "2x64,4x32,2x32", "--methods",
                f"{BENCH_ROW},block-ablation,activation", "--calibrate-samples", "8", "--steps", "1",
                "--batch-size", "8", "--subset", "32", "--test-subset", "16", "--dry-run", "--json")
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    calibration = plan["calibration"]
    assert {name: cell["passes"] for name, cell in calibration["cells"].items()} == PASSES
    assert {name: cell["passes_skipping_blocks"] for name, cell in calibration["cells"].items()} == SKIPPING
    passes = sum(PASSES.values())
    assert (calibration["passes"], calibration["passes_skipping_blocks"]) == (passes, sum(SKIPPING.values()))
    assert (calibration["samples"], calibration["data"], calibration["measured"]) == (8, IMAGES, False)
    assert calibration["pass_seconds"] >= SLEEP  # 8 images: one batch a pass
    # Both rounded (pass_seconds to 1 ms, the estimate to 0.1 s): within 0.05 + passes x 0.0005 of each other.
    assert calibration["estimated_seconds"] == pytest.approx(calibration["pass_seconds"] * passes,
                                                             abs=0.05 + passes * 5e-4)
    training = sum(part["steps"] * part["seconds_per_step"]
                   for part in (*plan["probe"].values(), *plan["condense"].values()))
    assert plan["estimated_seconds"] == pytest.approx(training + calibration["estimated_seconds"])
    assert plan["estimated_seconds"] >= SLEEP * passes - 0.05
    assert (plan["cells_to_run"], plan["cells_not_applicable"]) == (9 + 3, 0)  # the random baseline's 3 run too
    assert (f"calibration data checked (8 examples of {IMAGES}); {passes} passes over them when its 9 data-aware "
            f"cells run ({sum(SKIPPING.values())} with blocks skipped): at most about") in result.stderr, result.stderr
    assert "in all" in result.stderr and "calibrated on" not in result.stderr


def test_every_seed_calibrates_anew_and_a_bench_without_data_aware_cells_has_none(ancestry, slow_batches):
    settings = BenchSettings(sizes=parse_sizes("2x64"), methods=["block-ablation"], calibrate_samples=8, seeds=2,
                             probe=ProbeSettings(steps=1, batch_size=8, progress=False), subset="32",
                             test_subset="16")
    plan = bench(ancestry, IMAGES, None, settings, notify=lambda message: None, dry_run=True)
    assert plan["calibration"]["passes"] == 2 * ABLATION
    assert plan["calibration"]["cells"] == {"block-ablation@2x64": {"passes": ABLATION, "passes_skipping_blocks": 10}}
    settings.methods = ["select"]
    assert "calibration" not in bench(ancestry, IMAGES, None, settings, notify=lambda message: None, dry_run=True)
