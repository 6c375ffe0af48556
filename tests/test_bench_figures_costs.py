"""`lg bench`'s figures and costs agree with its table: with several seeds
summary.png's bars are the summary's means (not the last seed's finals) with
their 95 % intervals, a size's curve figure has one line and colour per
method, and a learngene's condense run is counted once in its row's cost,
never inside a cell's build."""

from __future__ import annotations

import shutil
import types

import pytest

import test_bench
from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.bench_tables import seed_mean_rows, summary_bars, summary_figure
from lgcli.evaluate import ProbeSettings
from lgcli.intervals import t_interval
from lgcli.report import curves_figure

CONDENSE_SECONDS = 1000.0  # what the fake clock says each condense run took: far above any real build here
LOAD_SECONDS = 500.0  # and loading a saved learngene: a cost of the row, not of the cell that asked for it


def _closed(figure):
    import matplotlib.pyplot as plt

    plt.close(figure)


def _bar_heights(figure) -> dict[str, list[float]]:
    from matplotlib.container import BarContainer

    (axes,) = figure.axes
    return {c.get_label(): [bar.get_height() for bar in c.patches] for c in axes.containers
            if isinstance(c, BarContainer)}


# Two seeds' finals per (method, size); 2x64's "bot" has none done (n/a).
FINALS = {("bot", "2x64"): None, ("bot", "3x128"): [52.0, 50.0], ("tleg", "2x64"): [60.0, 64.0],
          ("tleg", "3x128"): [76.0, 74.0], ("random", "2x64"): [30.0, 34.0], ("random", "3x128"): [32.0, 38.0]}


def two_seed_report(with_summary: bool = True) -> dict:
    cells, summary = [], {}
    for (method, size), finals in FINALS.items():
        for seed in (0, 1):
            if finals is None:
                cells.append({"method": method, "size": size, "seed": seed, "status": "n/a", "reason": "no"})
                continue
            cells.append({"method": method, "size": size, "seed": seed, "status": "done",
                          "row": {"source": method, "final": {"top1": finals[seed]}, "instinct": {"top1": 10.0}}})
        if finals is not None:
            summary.setdefault(method, {})[size] = {**t_interval(finals), "finals": finals, "instinct": 10.0}
    return {"data": {"name": "toy"}, "measure": "top1", "settings": {"steps": 20, "seed": 0},
            "sizes": ["2x64", "3x128"], "methods": ["bot", "tleg", "random"], "seeds": [0, 1], "cells": cells,
            **({"summary": summary} if with_summary else {})}


@pytest.mark.parametrize("with_summary", [True, False])
def test_summary_bars_are_the_means_over_seeds_with_their_intervals(with_summary):
    report = two_seed_report(with_summary)
    bars = summary_bars(report)
    assert set(bars) == {"bot", "tleg", "random"} and "2x64" not in bars["bot"]  # n/a: no bar
    for (method, size), finals in FINALS.items():
        if finals is None:
            continue
        assert bars[method][size]["height"] == pytest.approx(sum(finals) / 2)
        if with_summary:  # the summary's own interval, as the table's ± shows it
            held = report["summary"][method][size]
            assert bars[method][size]["height"] == pytest.approx(held["mean"])
            assert bars[method][size]["interval"] == pytest.approx((held["low"], held["high"]))
            assert held["low"] < held["mean"] < held["high"]
        else:  # no summary to take an interval from: a bar, no error bar
            assert bars[method][size]["interval"] is None


def test_one_seeds_bars_are_its_finals_without_error_bars():
    report = two_seed_report()
    report["seeds"] = [0]
    report["cells"] = [c for c in report["cells"] if c["seed"] == 1]
    report["summary"] = {m: {s: {**v, "finals": v["finals"][1:], "kind": "bootstrap over test examples"}
                             for s, v in at.items()} for m, at in report["summary"].items()}
    bars = summary_bars(report)
    assert bars["tleg"]["2x64"] == {"height": 64.0, "interval": None}
    assert bars["random"]["3x128"] == {"height": 38.0, "interval": None}


def test_the_summary_figure_draws_the_means_the_intervals_and_randoms_mean():
    report = two_seed_report()
    figure = summary_figure(report)
    try:
        (axes,) = figure.axes
        heights = _bar_heights(figure)
        assert heights == {"bot": [51.0], "tleg": [62.0, 75.0], "random": [32.0, 35.0]}
        # One error bar per drawn bar, from the summary's low to its high.
        spans = sorted((round(min(y), 6), round(max(y), 6)) for collection in axes.collections
                       for segment in collection.get_segments() for y in [[p[1] for p in segment]]
                       if len({p[0] for p in segment}) == 1)
        expected = sorted((round(v["low"], 6), round(v["high"], 6)) for at in report["summary"].values()
                          for v in at.values())
        assert spans == expected
        # The dashed random line: random's mean at each size, not a seed's final.
        dashed = [segment[0][1] for collection in axes.collections for segment in collection.get_segments()
                  if len({p[1] for p in segment}) == 1 and len({p[0] for p in segment}) == 2]
        assert sorted(dashed) == [32.0, 35.0]
    finally:
        _closed(figure)


def _row(name: str, lr: float, finals: list[float], source: str | None = None) -> dict:
    curve = [{"step": step, "loss": 2.0 - step / 10, "top1": value} for step, value in zip((0, 10, 20), finals)]
    return {"name": name, "source": source or name, "lr": lr, "curve": curve, "final": {"top1": finals[-1]}}


def test_seeds_of_a_method_are_one_row_whose_curve_is_their_mean():
    rows = [_row("bot", 3e-4, [10.0, 30.0, 50.0]), _row("random", 1e-3, [5.0, 20.0, 30.0]),
            _row("bot", 1e-3, [20.0, 40.0, 52.0]), _row("random", 1e-3, [7.0, 22.0, 40.0])]
    drawn = seed_mean_rows(rows)
    assert [row["name"] for row in drawn] == ["bot", "random"]
    bot, random = drawn
    assert [p["top1"] for p in bot["curve"]] == [15.0, 35.0, 51.0]
    assert [p["top1"] for p in random["curve"]] == [6.0, 21.0, 35.0]
    assert [p["step"] for p in bot["curve"]] == [0, 10, 20]
    assert bot["rates"] == [3e-4, 1e-3] and random["rates"] == [1e-3]
    assert bot["seed_curves"] == [rows[0]["curve"], rows[2]["curve"]]
    assert seed_mean_rows(rows[:2]) == rows[:2]  # one seed: the rows as they are


def test_the_curve_figure_gives_each_method_one_colour_and_one_legend_entry():
    rows = [_row("bot", 3e-4, [10.0, 30.0, 50.0]), _row("bot", 3e-4, [20.0, 40.0, 52.0]),
            _row("random", 1e-3, [5.0, 20.0, 30.0]), _row("random", 1e-3, [7.0, 22.0, 40.0])]
    figure = curves_figure({"data": {"name": "toy"}, "rows": seed_mean_rows(rows)})
    try:
        for axes in figure.axes:
            lines = axes.get_lines()
            labels = [line.get_label() for line in lines if not line.get_label().startswith("_")]
            assert labels == ["bot, mean of 2 seeds (lr 0.0003)", "random, mean of 2 seeds (lr 0.001)"]
            colours = {}
            for line in lines:  # each method's seeds and mean share its colour; no two methods share one
                colours.setdefault(line.get_color() if isinstance(line.get_color(), str)
                                   else tuple(line.get_color()), set()).add(line.get_linestyle())
            assert len(colours) == 2 and len(lines) == 6
        (legend,) = [axes.get_legend() for axes in figure.axes if axes.get_legend()]
        assert [text.get_text() for text in legend.get_texts()] == labels
    finally:
        _closed(figure)


ancestry = test_bench.ancestry  # the fixture: test_bench's two-block ViT ancestry


def settings() -> BenchSettings:
    return BenchSettings(sizes=parse_sizes("1x32,3x32"), methods=["tleg"], seeds=2, subset="64", test_subset="40",
                         condense_steps=2, condense_batch_size=16,
                         probe=ProbeSettings(steps=4, eval_every=2, batch_size=16, progress=False))


class _SlowCondense:
    """A fake clock for lgcli.bench: each condense run, and each load of a
    saved learngene, moves it on by a known number of seconds, so a cell
    whose build counted either shows it."""

    def __init__(self, monkeypatch):
        import time

        import lgcli.bench
        import lgcli.condense
        import lgcli.learngene_files
        import lgcli.report

        self.offset, self.condensed, self.curve_rows = 0.0, 0, []
        real_condense, real_load = lgcli.condense.condense_file, lgcli.learngene_files.load_learngene
        real_plot = lgcli.report.plot_curves

        def condense_file(*args, **kwargs):
            self.offset += CONDENSE_SECONDS
            self.condensed += 1
            return {**real_condense(*args, **kwargs), "seconds": CONDENSE_SECONDS}

        def load_learngene(*args, **kwargs):
            self.offset += LOAD_SECONDS
            return real_load(*args, **kwargs)

        def plot_curves(report, *args, **kwargs):
            self.curve_rows.append(report["rows"])
            return real_plot(report, *args, **kwargs)

        monkeypatch.setattr(lgcli.bench, "time", types.SimpleNamespace(perf_counter=lambda: time.perf_counter()
                                                                        + self.offset))
        monkeypatch.setattr(lgcli.condense, "condense_file", condense_file)
        monkeypatch.setattr(lgcli.learngene_files, "load_learngene", load_learngene)
        monkeypatch.setattr(lgcli.report, "plot_curves", plot_curves)


@pytest.fixture(scope="module")
def seeded(ancestry, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as monkeypatch:
        clock = _SlowCondense(monkeypatch)
        report = bench(ancestry, "fashion-mnist-mini", out, settings(), notify=lambda message: None)
    return out, report, clock


def _check_costs(report):
    tleg = [c for c in report["cells"] if c["method"] == "tleg"]
    assert len(tleg) == 4 and all(c["status"] == "done" for c in tleg)
    # No cell's build holds a condense run or a learngene's loading (each moved the clock by >= 500 s).
    assert all(c["build_seconds"] < LOAD_SECONDS for c in tleg), [c["build_seconds"] for c in tleg]
    cost = report["costs"]["tleg"]
    first = [c["build_seconds"] for c in tleg if c["seed"] == report["seeds"][0]]
    assert cost["sizes"] == 2 and cost["condense_seconds"] == report["learngenes"]["tleg"]["seconds"] \
        == CONDENSE_SECONDS
    assert cost["build_seconds"] == pytest.approx(sum(first), abs=0.11)
    assert cost["total_seconds"] == pytest.approx(CONDENSE_SECONDS + sum(first), abs=0.11)


def test_a_condense_run_is_counted_once_in_the_rows_cost_and_in_no_cell(seeded):
    _, report, clock = seeded
    assert clock.condensed == 2  # one per seed
    _check_costs(report)


def test_a_rerun_that_reuses_the_learngene_adds_neither_its_condense_nor_its_load_to_a_cell(seeded, ancestry,
                                                                                           tmp_path):
    first, report, _ = seeded
    out = tmp_path / "bench"
    shutil.copytree(first, out)
    (out / "cells" / "tleg@1x32~seed0.json").unlink()  # as if interrupted before this cell finished
    messages: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        clock = _SlowCondense(monkeypatch)
        again = bench(ancestry, "fashion-mnist-mini", out, settings(), notify=messages.append)
    assert clock.condensed == 0 and not any("condensing" in m for m in messages)
    assert clock.offset == LOAD_SECONDS  # the saved learngene was loaded, for the cell rebuilt
    _check_costs(again)
    assert again["learngenes"] == report["learngenes"]


def test_a_seeded_benchs_figures_show_one_line_per_method_and_the_summarys_means(seeded):
    _, report, clock = seeded
    assert len(clock.curve_rows) == 2  # a figure per size
    for rows in clock.curve_rows:
        assert [row["name"] for row in rows] == ["tleg", "random"]
        assert all(len(row["seed_curves"]) == 2 for row in rows)
    figure = summary_figure(report)
    try:
        heights = _bar_heights(figure)
        for method in ("tleg", "random"):
            assert heights[method] == pytest.approx([report["summary"][method][size]["mean"]
                                                     for size in report["sizes"]])
    finally:
        _closed(figure)
