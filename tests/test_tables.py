"""Tables and figures of `lg eval` and `lg bench`: at 80 and 120 columns no
cell is cut ("…"), every number shown is the report's own, and every name
is whole; figures are written as PNG, PDF or SVG by the suffix, give every
row its own colour however many rows, and the bench's bars start at 0."""

from __future__ import annotations

import io
import json
import random
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from lgcli.bench import RANDOM
from lgcli.bench_tables import print_bench_table
from lgcli.errors import LgError
from lgcli.report import check_plot_path, curves_figure, plot_curves, print_eval_table, row_colours
from lgcli.tables import Column, fitted_widths, print_table

WIDTHS = (80, 120)
NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?[xM]?$")


# ---------------------------------------------------------------- reading a printed table back

def rendered(print_function, report, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    print_function(report, console)
    return console.export_text()


def key_of(text: str) -> dict[str, str]:
    """The key under a table whose rows are numbered: number -> name."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"^\s*#  checkpoint\s*$", line)]
    key: dict[str, str] = {}
    for start in starts:
        for line in lines[start + 1:]:
            match = re.match(r"^\s*([0-9]+)  (\S.*?)\s*$", line)
            if not match:
                break
            key[match[1]] = match[2]
    return key


def printed_rows(text: str, labels: set[str]) -> dict[str, list[str]]:
    """The words of each row of the tables in `text`, by the row's label (its
    name, or its number when the names are in a key), over every table a wide
    one was split into. A row starts on a line whose first word is a label; it
    goes on over the indented lines under it."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"}]
    assert rules, text
    rows: dict[str, list[str]] = {}
    for number, rule in enumerate(rules):
        end = len(lines)
        if number + 1 < len(rules):  # up to the blank line before the next table's header
            end = max(i for i in range(rule, rules[number + 1]) if not lines[i].strip())
        label = None
        for line in lines[rule + 1:end]:
            if not line.strip():
                continue
            if not line[0].isspace():
                first = line.split()[0]
                if first not in labels:
                    break  # the key or the legend
                label, words = first, line.split()[1:]
            else:
                assert label is not None, line
                words = line.split()
            rows.setdefault(label, []).extend(word.strip("()") for word in words if word != "·")
    return rows


def check_layout(text: str, width: int) -> None:
    """Nothing cut, and no line wider than the console but a key's line: a
    name is printed whole there, on a line of its own, however long."""
    assert "…" not in text
    names = set(key_of(text).values())
    assert [line for line in text.splitlines() if cell_len(line.rstrip()) > width
            and line.split(maxsplit=1)[-1].strip() not in names] == [], text


def check_numbers(shown: list[str], expected: list[str], where: str) -> None:
    """Every figure of the report is shown, and every number shown is one of them."""
    assert [figure for figure in expected if figure not in shown] == [], (where, shown)
    assert [word for word in shown if NUMBER.match(word) and word not in expected] == [], (where, shown)


# ---------------------------------------------------------------- lg eval

LONG_NAMES = ["runs/2026-11-24/deit_small_patch16_224.distilled.shrunk-to-6x384.safetensors",
              "b.safetensors", "checkpoints/vit_tiny_grown_by_auto-lg_to_12x192.safetensors"]


def eval_report(task: str = "image-classification", steps: int = 300, rates=(3e-4,)) -> dict:
    """An `lg eval` report as evaluate() writes one (figures drawn at random,
    with the digits a report has), rows with long names and a random row."""
    rng = random.Random(len(task) + steps)
    text = task != "image-classification"
    rows = []
    for index, name in enumerate([*LONG_NAMES, RANDOM]):
        def point(step):
            loss = rng.uniform(0.5, 6.0)
            return ({"step": step, "loss": loss, "perplexity": 2.718281828 ** loss} if text else
                    {"step": step, "top1": rng.uniform(5, 99), "top5": rng.uniform(50, 100), "loss": loss})
        curve = [point(step) for step in (range(0, steps + 1, max(1, steps // 3)) if steps else [0])]
        row = {"name": name, "source": RANDOM if name == RANDOM else name,
               "architecture": {"depth": 6 + index, "width": 384, "parameters": rng.randint(10**6, 9 * 10**7)},
               "lr": rates[index % len(rates)] if steps else None, "curve": curve,
               "instinct": {k: v for k, v in curve[0].items() if k != "step"},
               "final": {k: v for k, v in curve[-1].items() if k != "step"}, "notes": []}
        if steps:
            measure = "loss" if text else "top1"
            row[f"mean_{measure}"] = rng.uniform(1, 90)
            row["dip"] = rng.uniform(0, 5)
            row["baseline"] = RANDOM
            row["steps_to_random_final"] = [round(rng.uniform(1, steps), 1), None, 0.0, 120.0][index]
            row["speedup"] = [round(rng.uniform(1, 20), 2), None, None, 1.0][index]
        rows.append(row)
    data = ({"name": "kjv-mini", "train": 900, "test": 100, "seq_len": 128, "tokenizer": "gpt2 (50,257 tokens)"}
            if text else {"name": "fashion-mnist-mini", "train": 9000, "test": 1000, "classes": 10})
    return {"version": 1, "task": task, "data": data, "rows": rows,
            "settings": {"steps": steps, "batch_size": 64, "warmup": steps // 10, "seed": 0}}


def expected_eval_figures(report: dict, row: dict) -> list[str]:
    architecture = row["architecture"]
    figures = [f"{architecture['depth']}x{architecture['width']}", f"{architecture['parameters'] / 1e6:.2f}M"]
    if report["task"] == "image-classification":
        figures += [f"{row['final']['top1']:.2f}", f"{row['final']['top5']:.2f}", f"{row['final']['loss']:.4f}"]
    else:
        figures += [f"{row['final']['loss']:.4f}", f"{row['final']['perplexity']:.2f}"]
    if report["settings"]["steps"] == 0:
        return figures
    if report["task"] == "image-classification":
        figures += [f"{row['instinct']['top1']:.2f}", f"{row['mean_top1']:.2f}", f"{row['dip']:.2f}"]
    else:
        figures += [f"{row['instinct']['loss']:.4f}", f"{row['mean_loss']:.4f}", f"{row['dip']:.4f}"]
    if len({r["lr"] for r in report["rows"]}) > 1:
        figures.append(f"{row['lr']:g}")
    steps = row["steps_to_random_final"]
    figures.append("never" if steps is None else f"{steps:.0f}")
    if row["speedup"] is not None:
        figures.append(f"{row['speedup']:.2f}x")
    return figures


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("report", [eval_report(), eval_report(steps=0), eval_report(rates=(1e-4, 3e-3)),
                                    eval_report("causal-lm")], ids=["probe", "scores", "rates", "text"])
def test_eval_table_fits_and_shows_the_reports_figures(report, width):
    text = rendered(print_eval_table, report, width)
    check_layout(text, width)
    key = key_of(text)
    names = [row["name"] for row in report["rows"]]
    labels = set(key) if key else set(names)
    rows = printed_rows(text, labels)
    by_name = {key.get(label, label): words for label, words in rows.items()}
    assert sorted(by_name) == sorted(names)  # every checkpoint, its name whole (in the table or the key)
    for row in report["rows"]:
        check_numbers(by_name[row["name"]], expected_eval_figures(report, row), row["name"])


def test_short_names_stay_in_the_table_and_long_ones_move_to_a_key():
    report = eval_report()
    wide = rendered(print_eval_table, report, 200)
    assert key_of(wide) == {} and all(name in wide for name in LONG_NAMES)
    narrow = rendered(print_eval_table, report, 80)
    assert key_of(narrow) == {str(number): row["name"] for number, row in enumerate(report["rows"], 1)}


def test_a_sweep_table_fits_too():
    report = eval_report()
    for row in report["rows"]:
        row["sweep"] = [{"lr": rate, "final": {"top1": 10 + rate * 1e4}, "mean_top1": 5 + rate * 1e4}
                        for rate in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)]
    text = rendered(print_eval_table, report, 80)
    check_layout(text, 80)
    sweep = text[text.index("learning-rate sweep"):]
    key = key_of(sweep)
    rows = printed_rows(sweep, set(key))
    for label, words in rows.items():
        row = next(r for r in report["rows"] if r["name"] == key[label])
        check_numbers(words, [f"{figure:.2f}" for run in row["sweep"] for figure in (run["final"]["top1"],
                                                                                     run["mean_top1"])], row["name"])


def test_the_eval_table_through_the_cli_at_80_columns(tmp_path, monkeypatch, lg):
    """COLUMNS is honoured on a pipe; the table's figures are the --json report's."""
    from test_eval import tiny

    name = "a_checkpoint_with_a_long_name_that_would_not_fit_beside_the_figures.safetensors"
    checkpoint = tiny(tmp_path / name)
    args = ["eval", checkpoint, "--steps", 2, "--eval-every", 1, "--batch-size", 16, "--subset", 32,
            "--test-subset", 20, "--baseline", "random"]
    report = json.loads(lg(*args, "--json").stdout)
    monkeypatch.setenv("COLUMNS", "80")
    result = lg(*args)
    assert result.code == 0, result.stderr
    text = result.stdout.decode()
    check_layout(text, 80)
    key = key_of(text)
    assert sorted(key.values()) == [name, RANDOM]
    for label, words in printed_rows(text, set(key)).items():
        row = next(r for r in report["rows"] if r["name"] == key[label])
        check_numbers(words, expected_eval_figures(report, row), row["name"])


# ---------------------------------------------------------------- lg bench

BENCH_SIZES = ["2x64", "3x96", "6x128", "6x192", "9x192", "12x192", "12x384", "24x768"]
BENCH_METHODS = ["bot", "select", "heur-lg", "auto-lg", "clone", "tleg-fit", "tleg", "wave", "peg", "wave+fit",
                 "peg+fit", RANDOM]


def bench_report(measure: str = "top1") -> dict:
    """A bench report as bench() writes one: every method at eight sizes,
    some cells n/a, learngenes with their condense runs."""
    rng = random.Random(1)
    cells = []
    for size in BENCH_SIZES:
        for method in BENCH_METHODS:
            if method != RANDOM and rng.random() < 0.2:
                cells.append({"method": method, "size": size, "status": "n/a", "reason": "cannot reach it"})
                continue
            final, instinct = ({"top1": rng.uniform(10, 99)}, {"top1": rng.uniform(0, 90)}) if measure == "top1" \
                else ({"loss": rng.uniform(1, 6)}, {"loss": rng.uniform(3, 11)})
            steps = None if rng.random() < 0.2 else round(rng.uniform(0, 300), 1)
            row = {"source": RANDOM if method == RANDOM else method, "final": final, "instinct": instinct,
                   "steps_to_random_final": steps, "speedup": round(rng.uniform(1, 40), 2) if steps else None}
            cells.append({"method": method, "size": size, "status": "done", "row": row,
                          "stores": 0 if method == RANDOM else rng.randint(10**5, 10**8)})
    learngenes = {kind: {"steps": 600, "seconds": rng.uniform(10, 500), "parameters": rng.randint(10**5, 10**7)}
                  for kind in ("tleg", "wave", "peg")}
    costs = {method: {"sizes": 8, "total_seconds": rng.uniform(0, 900)} for method in BENCH_METHODS
             if method != RANDOM}
    return {"data": {"name": "fashion-mnist-mini"}, "measure": "loss" if measure == "loss" else "top1",
            "settings": {"steps": 300, "seed": 0, "fit_steps": 50}, "sizes": BENCH_SIZES,
            "methods": BENCH_METHODS, "cells": cells, "learngenes": learngenes, "costs": costs}


def expected_bench_figures(report: dict, method: str) -> list[str]:
    key = report["measure"]
    shown = ".3f" if key == "loss" else ".1f"
    figures = []
    for cell in (c for c in report["cells"] if c["method"] == method):
        if cell["status"] != "done":
            figures.append("n/a")
            continue
        row = cell["row"]
        figures += [f"{row['final'][key]:{shown}}", f"{row['instinct'][key]:{shown}}"]
        if method != RANDOM:
            steps = row["steps_to_random_final"]
            figures.append("never" if steps is None else f"{steps:.0f}")
            figures += [f"{row['speedup']:.2f}x"] if row["speedup"] is not None else []
    stores = next((c["stores"] for c in report["cells"] if c["method"] == method and c.get("stores")), 0)
    figures += [f"{stores / 1e6:.2f}M"] if stores else []
    made = report["learngenes"].get(method.removesuffix("+fit"))
    if made:
        figures += [str(made["steps"]), f"{made['seconds']:.0f}"]
        figures += [str(report["settings"]["fit_steps"])] if method.endswith("+fit") else []
    if method in report["costs"]:
        figures.append(f"{report['costs'][method]['total_seconds']:.0f}")
    return figures


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("measure", ["top1", "loss"])
def test_bench_table_fits_and_shows_the_reports_figures(measure, width):
    report = bench_report(measure)
    text = rendered(print_bench_table, report, width)
    check_layout(text, width)
    rows = printed_rows(text, set(BENCH_METHODS))
    assert sorted(rows) == sorted(BENCH_METHODS)  # every method's name whole
    for method in BENCH_METHODS:
        check_numbers(rows[method], expected_bench_figures(report, method), method)
    for size in BENCH_SIZES:  # every size heads a column
        assert re.search(rf"(^|\s){size}(\s|$)", text, re.MULTILINE)


@pytest.mark.parametrize("fit_steps, said", [(1, "+ 1 fit step per size"), (50, "+ 50 fit steps per size")])
def test_a_fitted_rows_cost_counts_its_fit_steps_as_lg_counts_steps(fit_steps, said):
    """"1 step", "+ 1 fit step per size": one noun, singular for one (`counted`)."""
    from lgcli.bench_tables import table_rows

    report = bench_report()
    report["settings"]["fit_steps"] = fit_steps
    report["learngenes"]["peg"]["steps"] = 1
    rows = {row[0]: row for row in table_rows(report)}
    assert any(said in str(part) for part in rows["peg+fit"]), rows["peg+fit"]
    assert any("1 step, " in str(part) for part in rows["peg"])  # the condense run's steps, counted alike
    assert not any("fit step" in str(part) for part in rows["peg"])


# ---------------------------------------------------------------- the layout itself

def test_widths_narrow_the_prose_columns_and_never_below_a_word():
    columns = [["name", "a_long_name"], ["figure", "12.34"], ["words", "one two three four five six"]]
    wraps = [False, False, True]
    assert fitted_widths(columns, 200, wraps) == [11, 6, 27]
    # 40 columns: the prose column gives way, the others keep their width.
    assert fitted_widths(columns, 40, wraps) == [11, 6, 40 - 11 - 6 - 2 * 2]
    # Its longest word is the floor: "three" is 5.
    assert fitted_widths(columns, 11 + 6 + 5 + 4, wraps) == [11, 6, 5]
    assert fitted_widths(columns, 11 + 6 + 4 + 4, wraps) is None
    # Columns of figures are never narrowed, whatever their words.
    assert fitted_widths(columns, 40) is None
    assert fitted_widths([["120 (2.5x)"], ["x"]], 8, [False, True]) is None


def test_columns_split_over_tables_when_too_many_for_the_width():
    columns = [Column("name", "left"), *(Column(f"c{index}") for index in range(12)), Column("cost", group=1)]
    rows = [["row-a", *(f"{index}.123456" for index in range(12)), "9 s"]]
    text = rendered(lambda report, console: print_table(console, "title", columns, report), rows, 50)
    check_layout(text, 50)
    tables = text.split("\n\n")
    assert len(tables) >= 3 and all("row-a" in table for table in tables)
    assert all(f"{index}.123456" in text for index in range(12))
    # The cost column (another group) starts a table of its own, though it would fit beside c11.
    assert "c11" not in tables[-1] and "cost" in tables[-1] and "9 s" in tables[-1]


# ---------------------------------------------------------------- figures

@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".pdf", b"%PDF-"),
                                           (".svg", b"<?xml")])
def test_curves_are_written_in_the_format_the_suffix_names(tmp_path, suffix, magic):
    path = tmp_path / f"curves{suffix}"
    plot_curves(eval_report(), path)
    data = path.read_bytes()
    assert data.startswith(magic)
    if suffix == ".svg":
        assert b"<svg" in data[:1000]
    plot_curves(eval_report(), path, force=True)  # no creation date: the same report draws the same bytes
    assert path.read_bytes() == data


@pytest.mark.parametrize("name", ["curves.jpg", "curves", "curves.png.gz", "curves.eps"])
def test_other_plot_suffixes_are_refused_in_one_line(tmp_path, name):
    with pytest.raises(LgError) as caught:
        check_plot_path(tmp_path / name)
    assert "give a .png, .pdf or .svg file name" in str(caught.value) and "\n" not in str(caught.value)


def test_eval_plot_writes_a_pdf_through_the_cli(tmp_path, lg):
    from test_eval import tiny

    checkpoint = tiny(tmp_path / "a.safetensors")
    result = lg("eval", checkpoint, "--test-subset", 20, "--plot", tmp_path / "curves.PDF")
    assert result.code == 0, result.stderr
    assert (tmp_path / "curves.PDF").read_bytes().startswith(b"%PDF-")


@pytest.mark.parametrize("count", [1, 10, 11, 20, 21, 25, 60])
def test_row_colours_are_all_different(count):
    assert len(set(row_colours(count))) == count


def test_25_curves_each_have_their_own_colour_and_style():
    report = eval_report()
    report["rows"] = [{**report["rows"][index % 4], "name": f"row {index}",
                       "source": RANDOM if index == 24 else f"row {index}"} for index in range(25)]
    figure = curves_figure(report)
    try:
        for axes in figure.axes:
            lines = axes.get_lines()
            assert [line.get_label() for line in lines] == [row["name"] + " (lr 0.0003)" for row in report["rows"]]
            pairs = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in lines}
            assert len(pairs) == 25 and len({line.get_color() for line in lines}) == 25
            assert lines[24].get_linestyle() == "--"  # random, dashed
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


def test_the_bench_summary_bars_start_at_zero_and_25_methods_have_25_colours():
    from lgcli.bench_tables import summary_figure

    report = bench_report()
    methods = [f"method-{index}" for index in range(24)] + [RANDOM]
    template = [c for c in report["cells"] if c["status"] == "done"]
    report["methods"], report["sizes"] = methods, BENCH_SIZES[:2]
    report["cells"] = [{**template[index % len(template)], "method": method, "size": size}
                       for index, (method, size) in enumerate((m, s) for m in methods for s in report["sizes"])]
    for cell in report["cells"]:  # every bar well above 0: a floor would show as a raised axis
        cell["row"] = {**cell["row"], "final": {"top1": 60.0 + len(cell["method"]) % 7}}
    figure = summary_figure(report)
    try:
        (axes,) = figure.axes
        assert axes.get_ylim()[0] == 0.0
        bars = [patch for container in axes.containers for patch in container.patches]
        assert len(bars) == 50 and all(bar.get_y() == 0.0 for bar in bars)
        colours = [tuple(container.patches[0].get_facecolor()) for container in axes.containers]
        assert [container.get_label() for container in axes.containers] == methods
        assert len(set(colours)) == 25
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


def test_steps_to_random_say_a_crossing_before_the_first_step_as_it_is():
    """A row that started below the baseline's final figure and passed it
    within the first step (0.5, interpolated) read "0", as one at the start."""
    from lgcli.report import steps_to_random_cell

    assert steps_to_random_cell({"steps_to_random_final": 0}) == "0 (at start)"
    assert steps_to_random_cell({"steps_to_random_final": 0.5, "speedup": 200.0}) == "0.5 (200.00x)"
    assert steps_to_random_cell({"steps_to_random_final": 12.4, "speedup": 8.06}) == "12 (8.06x)"
    assert steps_to_random_cell({"steps_to_random_final": None}) == "never"
