"""How sure a comparison is (lgcli.intervals): Student's t quantiles, the
t-interval over seeds and the bootstrap over test examples checked against
their formulas, the verdict's ties, and the bench's intervals on a seeded toy
run equal to the formula's, entry by entry."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import timm
import torch

import lgcli
from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.bench_tables import markdown_table
from lgcli.errors import UsageError
from lgcli.evaluate import ProbeSettings
from lgcli.intervals import bootstrap_interval, student_t_quantile, t_interval, verdict

# t(0.975, ν) from the standard tables.
T_975 = {1: 12.7062047, 2: 4.30265273, 3: 3.18244631, 4: 2.77644511, 9: 2.26215716, 30: 2.04227246}


@pytest.mark.parametrize("degrees, expected", sorted(T_975.items()))
def test_student_t_quantiles_are_the_tables(degrees, expected):
    assert student_t_quantile(0.975, degrees) == pytest.approx(expected, abs=1e-6)
    assert student_t_quantile(0.025, degrees) == pytest.approx(-expected, abs=1e-6)


def test_the_t_interval_is_mean_plus_minus_t_s_over_root_n():
    values = [81.5, 83.0, 82.25, 84.0]
    mean = sum(values) / 4
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    interval = t_interval(values)
    assert interval["mean"] == pytest.approx(82.6875)
    assert interval["low"] == pytest.approx(mean - T_975[3] * s / 2, abs=1e-6)
    assert interval["high"] == pytest.approx(mean + T_975[3] * s / 2, abs=1e-6)
    assert t_interval([7.0]) == {"mean": 7.0, "low": 7.0, "high": 7.0, "n": 1, "kind": "none"}


def test_the_bootstrap_is_the_percentile_interval_of_seeded_resamples():
    values = [100.0] * 70 + [0.0] * 30
    interval = bootstrap_interval(values, resamples=500, seed=3)
    rng = random.Random(3)
    draws = [sum(values[rng.randrange(100)] for _ in range(100)) / 100 for _ in range(500)]
    assert interval["mean"] == 70.0
    assert interval["low"] == pytest.approx(np.percentile(draws, 2.5))
    assert interval["high"] == pytest.approx(np.percentile(draws, 97.5))
    # A ratio (a text window's loss sum over its tokens): resampled as pairs.
    sums, tokens = [2.0, 9.0, 4.0], [1, 3, 2]
    ratio = bootstrap_interval(sums, tokens, resamples=200, seed=0)
    assert ratio["mean"] == pytest.approx(15 / 6)
    assert min(s / t for s, t in zip(sums, tokens)) <= ratio["low"] <= ratio["high"] <= 3.0
    constant = bootstrap_interval([5.0] * 10, resamples=50)
    assert constant["low"] == constant["high"] == 5.0


def test_rows_whose_intervals_overlap_the_best_tie():
    rows = {"a": {"mean": 85.0, "low": 84.0, "high": 86.0}, "b": {"mean": 84.5, "low": 83.9, "high": 85.1},
            "c": {"mean": 80.0, "low": 79.0, "high": 83.8}}
    assert verdict(rows) == {"best": "a", "tied": ["b"]}
    assert verdict(rows, higher_is_better=False) == {"best": "c", "tied": []}  # a loss: lower is better


ANCESTRY = dict(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **ANCESTRY)
    path = tmp_path_factory.mktemp("ancestry") / "ancestry.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


def tiny(**overrides) -> BenchSettings:
    base = dict(sizes=parse_sizes("1x32"), methods=["select", "block-influence"], subset="64", test_subset="40",
                calibrate_samples=8, probe=ProbeSettings(steps=3, eval_every=3, batch_size=16, progress=False))
    return BenchSettings(**{**base, **overrides})


def test_the_benchs_intervals_over_seeds_are_the_formulas(ancestry, tmp_path):
    report = bench(ancestry, "fashion-mnist-mini", tmp_path, tiny(seeds=3), notify=lambda m: None)
    assert report["seeds"] == [0, 1, 2]
    for method in ("select", "block-influence", "random"):
        finals = [c["row"]["final"]["top1"] for c in report["cells"] if c["method"] == method]
        assert len(finals) == 3
        summary = report["summary"][method]["1x32"]
        mean = sum(finals) / 3
        half = T_975[2] * math.sqrt(sum((f - mean) ** 2 for f in finals) / 2) / math.sqrt(3)
        assert summary["finals"] == finals
        assert (summary["mean"], summary["low"], summary["high"]) == pytest.approx((mean, mean - half, mean + half),
                                                                                   abs=1e-6)
    best = report["verdicts"]["1x32"]["best"]
    assert report["summary"][best]["1x32"]["mean"] == max(s["1x32"]["mean"] for s in report["summary"].values())
    assert "±" in markdown_table(report) and "mean of seeds 0-2" in markdown_table(report)
    # Several seeds' cells are means with intervals, with no steps to random's final: the caption says so.
    caption = markdown_table(report).splitlines()[-1]
    assert caption.startswith("Mean final top-1 after 3 steps ± its 95 % interval (mean instinct at step 0)")
    assert "steps to random's final" not in caption


def test_one_seed_is_bootstrapped_over_the_test_examples(ancestry, tmp_path):
    report = bench(ancestry, "fashion-mnist-mini", tmp_path, tiny(), notify=lambda m: None)
    import json

    cell = json.loads((tmp_path / "cells" / "select@1x32.json").read_text())
    examples = cell["row"]["final_examples"]
    assert len(examples) == 40 and set(examples) <= {0.0, 100.0}
    assert sum(examples) / 40 == pytest.approx(cell["row"]["final"]["top1"])
    summary = report["summary"]["select"]["1x32"]
    expected = bootstrap_interval(examples, seed=0)
    assert (summary["low"], summary["high"], summary["kind"]) == (expected["low"], expected["high"],
                                                                   "bootstrap over test examples")
    assert "final_examples" not in report["cells"][0]["row"]  # the report keeps the interval, the cell its examples


def test_a_budget_of_zero_with_a_learngene_is_refused(ancestry, tmp_path):
    with pytest.raises(UsageError, match="--budget 0"):
        bench(ancestry, "fashion-mnist-mini", tmp_path / "b", tiny(methods=["select", "tleg"], budget=0),
              notify=lambda m: None)
    assert not (tmp_path / "b").exists()


def test_a_budget_gives_every_path_the_same_steps(ancestry, tmp_path):
    """--budget N: a resize is distilled from the ancestry for N steps, a
    learngene condensed for N; random stays the reference."""
    report = bench(ancestry, "fashion-mnist-mini", tmp_path,
                   tiny(methods=["select", "block-influence", "tleg"], budget=2, condense_batch_size=16),
                   notify=lambda m: None)
    cells = {c["method"]: c for c in report["cells"]}
    for method in ("select", "block-influence"):
        assert cells[method]["details"]["distill"]["steps"] == 2
    assert cells["block-influence"]["details"]["chosen"]["kept_layers"] in ([0], [1])
    assert report["learngenes"]["tleg"]["steps"] == 2
    assert "distill" not in cells["random"].get("details", {})
    assert report["budget"] == 2 and "Equal compute: every path had 2 training steps" in markdown_table(report)


def test_a_budget_of_0_is_captioned_as_no_training(ancestry, tmp_path):
    """At budget 0 nothing is distilled: the caption does not say lg distill ran."""
    report = bench(ancestry, "fashion-mnist-mini", tmp_path, tiny(methods=["select"], budget=0),
                   notify=lambda m: None)
    assert "distill" not in next(c for c in report["cells"] if c["method"] == "select").get("details", {})
    table = markdown_table(report)
    assert "no path trained before the probe" in table and "lg distill" not in table


def test_a_bench_of_several_seeds_keeps_each_seeds_cell_and_resumes(ancestry, tmp_path):
    first = bench(ancestry, "fashion-mnist-mini", tmp_path, tiny(methods=["select"], seeds=2), notify=lambda m: None)
    assert sorted(p.name for p in (tmp_path / "cells").iterdir()) == [
        "random@1x32~seed0.json", "random@1x32~seed1.json", "select@1x32~seed0.json", "select@1x32~seed1.json"]
    messages: list[str] = []
    again = bench(ancestry, "fashion-mnist-mini", tmp_path, tiny(methods=["select"], seeds=2), notify=messages.append)
    assert sum("done before, reused" in m for m in messages) == 4
    assert again["summary"] == first["summary"]
