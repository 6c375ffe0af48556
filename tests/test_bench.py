"""`lg bench`: methods x sizes on a tiny ancestry; table, JSON and figures agree;
a resumed run recomputes no finished cell; sizes and methods are checked."""

from __future__ import annotations

import json
import shutil

import pytest
import timm
import torch

import lgcli
from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.bench_tables import markdown_table
from lgcli.errors import LgError, UsageError
from lgcli.evaluate import ProbeSettings, steps_to_reach

ANCESTRY = dict(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
# 1 x 32 shrinks the depth only (select and TLEG reach it, clone cannot);
# 3 x 64 grows both (clone reaches it, select and TLEG cannot).
SIZES = "1x32,3x64"
METHODS = ["select", "clone", "tleg"]
FAST = dict(subset="64", test_subset="40", condense_steps=2, condense_batch_size=16)


def settings(**overrides) -> BenchSettings:
    base = dict(sizes=parse_sizes(SIZES), methods=METHODS,
                probe=ProbeSettings(steps=4, eval_every=2, batch_size=16, progress=False), **FAST)
    return BenchSettings(**{**base, **overrides})


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **ANCESTRY)
    path = tmp_path_factory.mktemp("ancestry") / "ancestry.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


@pytest.fixture(scope="module")
def first_run(ancestry, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    messages: list[str] = []
    report = bench(ancestry, "fashion-mnist-mini", out, settings(), notify=messages.append)
    return out, report, messages


def test_every_method_and_size_is_a_cell_and_unreachable_ones_say_why(first_run):
    out, report, messages = first_run
    cells = {(c["method"], c["size"]): c for c in report["cells"]}
    assert report["methods"] == [*METHODS, "random"] and report["sizes"] == ["1x32", "3x64"]
    assert set(cells) == {(m, s) for m in report["methods"] for s in report["sizes"]}
    done = {key for key, cell in cells.items() if cell["status"] == "done"}
    assert done == {("select", "1x32"), ("tleg", "1x32"), ("clone", "3x64"), ("random", "1x32"),
                    ("random", "3x64")}
    assert "grow" in cells[("select", "3x64")]["reason"] or "select" in cells[("select", "3x64")]["reason"]
    assert "width" in cells[("tleg", "3x64")]["reason"]
    for key in done:
        row = cells[key]["row"]
        depth, width = map(int, key[1].split("x"))
        assert row["architecture"]["depth"] == depth and row["architecture"]["width"] == width
        assert [p["step"] for p in row["curve"]] == [0, 2, 4]
        # Steps to random's final, from the row's own curve and its size's random row.
        target = cells[("random", key[1])]["row"]["final"]["top1"]
        expected = steps_to_reach(row["curve"], target)
        assert row["steps_to_random_final"] == (None if expected is None else round(expected, 1))
    # What each method stores, and the learngene's cost to make.
    assert cells[("select", "1x32")]["stores"] == report["ancestry"]["parameters"]
    assert report["learngenes"]["tleg"]["steps"] == 2
    assert cells[("tleg", "1x32")]["stores"] == report["learngenes"]["tleg"]["parameters"]
    assert sum("cell" in m and "of 8" in m for m in messages) == 8


def test_json_table_and_figures_agree(first_run):
    out, report, _ = first_run
    saved = json.loads((out / "bench.json").read_text())
    assert saved == json.loads(json.dumps(report, default=str))
    for name in ("summary.png", "curves_1x32.png", "curves_3x64.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = markdown_table(report)
    lines = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    for cell in report["cells"]:
        row_text = lines[cell["method"]]
        if cell["status"] == "done":
            assert f"{cell['row']['final']['top1']:.1f} ({cell['row']['instinct']['top1']:.1f})" in row_text
        else:
            assert "n/a" in row_text


def test_a_resumed_run_recomputes_no_finished_cell(first_run, ancestry):
    out, report, _ = first_run
    before = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    (out / "cells" / "select@1x32.json").unlink()  # as if interrupted before this cell finished
    messages: list[str] = []
    again = bench(ancestry, "fashion-mnist-mini", out, settings(), notify=messages.append)
    reused = sorted(m.split(":")[1].strip() for m in messages if "reused" in m)
    finished = sorted(f"{c['method']}@{c['size']}" for c in report["cells"] if c["status"] == "done")
    # An n/a cell is tried again (a check; an lg that has learned to build it
    # fills it) and, still n/a, its file is left as it was (below).
    assert reused == [name for name in finished if name != "select@1x32"] and len(reused) == 4
    assert not any("condensing" in m for m in messages)  # the learngene is reused too
    after = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    assert {k: v for k, v in after.items() if k != "select@1x32.json"} == \
           {k: v for k, v in before.items() if k != "select@1x32.json"}
    # The recomputed cell is the same measurement (same data order and seed).
    old = next(c for c in report["cells"] if c["method"] == "select" and c["size"] == "1x32")
    new = next(c for c in again["cells"] if c["method"] == "select" and c["size"] == "1x32")
    assert new["row"]["curve"] == old["row"]["curve"]
    assert again["learngenes"] == report["learngenes"]


def test_a_cell_saved_as_na_is_built_when_lg_now_can(first_run, ancestry, tmp_path):
    """An n/a saved by an lg that could not build the cell (a bench on text
    once refused every healed resize) is not reused: the cell is built."""
    first, _, _ = first_run
    out = tmp_path / "bench"
    shutil.copytree(first, out)
    path = out / "cells" / "select@1x32.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({"key": saved["key"], "method": "select", "size": "1x32", "status": "n/a",
                                "reason": "an error of an older lg"}))
    again = bench(ancestry, "fashion-mnist-mini", out, settings(), notify=lambda m: None)
    cell = next(c for c in again["cells"] if (c["method"], c["size"]) == ("select", "1x32"))
    assert cell["status"] == "done" and cell["row"]["curve"] == saved["row"]["curve"]


def test_other_arguments_do_not_reuse_cells(first_run, ancestry):
    out, _, _ = first_run
    messages: list[str] = []
    bench(ancestry, "fashion-mnist-mini", out, settings(sizes=[(1, 32)], methods=["select"],
                                                        probe=ProbeSettings(steps=2, batch_size=16, progress=False)),
          notify=messages.append)
    assert not any("reused" in m for m in messages)


def test_cells_distilled_before_distill_fed_a_models_own_recipe_are_not_reused(ancestry, tmp_path):
    """lg distill fed every model lg's default preprocessing until it was
    fixed: a bench of a model with a recipe of its own (a real DINOv2's
    ImageNet statistics) whose cells were distilled then must not reuse
    them. Its key says so; a model prepared as lg's default prepares (the
    example), or a budget of none, keeps the key its cells were saved under."""
    from lgcli.bench import reuse_key
    from lgcli.loading import load
    from lgcli.preprocessing import Preprocessing, attach

    own = tmp_path / "own.safetensors"
    recipe = Preprocessing(mean=(0.2,), std=(0.3,), interpolation="bicubic", crop_pct=1.0,
                           input_size=(1, 28, 28), source="a test's own")
    lgcli.save_model(attach(lgcli.load_model(ancestry)[0], recipe), own)
    data = {"name": "fashion-mnist-mini"}
    assert reuse_key(load(own), data, settings(budget=300))["distilled_with"] == "the model's own preprocessing"
    assert "distilled_with" not in reuse_key(load(own), data, settings(budget=0))
    assert "distilled_with" not in reuse_key(load(ancestry), data, settings(budget=300))
    before = reuse_key(load(ancestry), data, settings(budget=300))
    assert set(before) == {"ancestry", "data", "probe", "budget", "preprocessing"}


def test_cells_distilled_at_another_alpha_than_before_are_not_reused(ancestry):
    """lg distill healed every cell at alpha 1 until its default on text
    became 0.5: a text bench's key names its alpha, so those cells are
    distilled again; alpha 1 (images) keeps the key its cells were saved under."""
    from lgcli.bench import reuse_key
    from lgcli.loading import load

    data = {"name": "kjv-mini"}
    assert reuse_key(load(ancestry), data, settings(budget=300), distill_alpha=0.5)["distill_alpha"] == 0.5
    assert "distill_alpha" not in reuse_key(load(ancestry), data, settings(budget=0), distill_alpha=0.5)
    assert reuse_key(load(ancestry), data, settings(budget=300), distill_alpha=1.0) == \
        reuse_key(load(ancestry), data, settings(budget=300))


def test_a_kinds_condense_budget_recomputes_only_its_own_cells(first_run, ancestry):
    """Changing TLEG's budget condenses TLEG again and reuses every other cell
    (the resize methods and random do not depend on it)."""
    out, report, _ = first_run
    bench(ancestry, "fashion-mnist-mini", out, settings(), notify=lambda m: None)  # every cell as first_run's
    messages: list[str] = []
    again = bench(ancestry, "fashion-mnist-mini", out, settings(condense_steps={"tleg": 3}), notify=messages.append)
    reused = {m.split(": ")[1] for m in messages if "reused" in m}
    assert reused == {"select@1x32", "clone@3x64", "random@1x32", "random@3x64"}  # the n/a cells are tried again
    assert sum("condensing a tleg learngene (3 steps)" in m for m in messages) == 1
    assert again["learngenes"]["tleg"]["steps"] == 3
    assert again["settings"]["condense_steps"] == {"tleg": 3}


def test_costs_add_condensing_once_and_growth_per_size(first_run):
    """Per row, what making its model at every size cost: the learngene's
    condense seconds once plus each cell's build; a resize method's builds."""
    _, report, _ = first_run
    cells = [c for c in report["cells"] if c["status"] == "done"]
    for method in ("select", "clone", "tleg"):
        built = [c["build_seconds"] for c in cells if c["method"] == method]
        cost = report["costs"][method]
        once = report["learngenes"]["tleg"]["seconds"] if method == "tleg" else 0.0
        assert cost["sizes"] == len(built) == 1
        assert cost["total_seconds"] == pytest.approx(round(once + sum(built), 1), abs=0.11)
    assert "random" not in report["costs"]
    table = markdown_table(report)
    assert "| all sizes cost |" in table.splitlines()[0]
    tleg = next(line for line in table.splitlines() if line.startswith("| tleg |"))
    assert tleg.endswith(f"| {report['costs']['tleg']['total_seconds']:.0f} s |")


@pytest.mark.parametrize("text, expected", [("600", 600), ("tleg=600,wave=1500", {"tleg": 600, "wave": 1500}),
                                            (" tleg = 5 ", {"tleg": 5})])
def test_condense_steps_per_kind(text, expected):
    from lgcli.bench_settings import parse_condense_steps

    assert parse_condense_steps(text) == expected


@pytest.mark.parametrize("text", ["", "tleg", "bogus=3", "tleg=-1", "tleg=3,x", "3.5"])
def test_bad_condense_steps_are_refused(text, ancestry, tmp_path, lg):
    result = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "1x32", "--condense-steps", text,
                "-o", tmp_path / "out")
    assert result.code != 0 and result.stderr.count("\n") == 1 and "--condense-steps" in result.stderr, result.stderr


def test_through_the_cli(first_run, ancestry, lg):
    out, report, _ = first_run
    result = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", SIZES, "--methods", ",".join(METHODS),
                "--steps", "4", "--eval-every", "2", "--batch-size", "16", "--subset", "64", "--test-subset", "40",
                "--condense-steps", "2", "-o", out, "--json")
    assert result.code == 0, result.stderr
    printed = json.loads(result.stdout)
    assert [c["status"] for c in printed["cells"]] == [c["status"] for c in report["cells"]]
    assert "cell 8 of 8" in result.stderr


def test_the_table_at_80_columns_shows_the_jsons_figures(first_run, ancestry, lg, monkeypatch):
    """Every cell reused: the table the CLI prints in 80 columns (COLUMNS)
    cuts nothing and shows the figures of bench.json."""
    from test_tables import check_layout, check_numbers, expected_bench_figures, printed_rows

    out, _, _ = first_run
    monkeypatch.setenv("COLUMNS", "80")
    result = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", SIZES, "--methods", ",".join(METHODS),
                "--steps", "4", "--eval-every", "2", "--batch-size", "16", "--subset", "64", "--test-subset", "40",
                "--condense-steps", "2", "-o", out)
    assert result.code == 0, result.stderr
    text = result.stdout.decode()
    check_layout(text, 80)
    report = json.loads((out / "bench.json").read_text())
    rows = printed_rows(text, set(report["methods"]))
    assert sorted(rows) == sorted(report["methods"])
    for method in report["methods"]:
        check_numbers(rows[method], expected_bench_figures(report, method), method)


@pytest.mark.parametrize("text", ["", "3x", "x64", "3x64,0x8", "3*64", "３x64"])
def test_bad_sizes_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_sizes(text)


def test_bad_requests_are_one_line(ancestry, tmp_path, lg):
    result = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "1x32", "--methods", "nope",
                "-o", tmp_path / "r")
    assert result.code == 2 and "unknown" in result.stderr and len(result.stderr.splitlines()) == 1
    result = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "1x32")
    assert result.code == 2 and "-o DIR" in result.stderr  # a missing -o is a usage mistake
    assert parse_sizes("3x64, 3x64,6x128") == [(3, 64), (6, 128)]
    with pytest.raises(LgError):
        BenchSettings(sizes=[], probe=ProbeSettings(steps=1))
    with pytest.raises(LgError, match="--fit-steps"):  # the library checks it, not only typer's min=0
        BenchSettings(sizes=[(1, 32)], probe=ProbeSettings(steps=1), fit_steps=-1)


def test_fitted_rows_fit_per_size_and_leave_the_other_cells_reused(first_run, ancestry, tmp_path):
    """--fit-steps adds KIND+fit rows (the per-size part fitted before the
    probe); every cell of the earlier run is reused, and the learngene too."""
    first, report, _ = first_run
    out = tmp_path / "bench"
    shutil.copytree(first, out)
    bench(ancestry, "fashion-mnist-mini", out, settings(), notify=lambda m: None)  # as the first run left it
    messages: list[str] = []
    fitted = bench(ancestry, "fashion-mnist-mini", out,
                   settings(methods=[*METHODS, "peg", "peg+fit"], fit_steps=3), notify=messages.append)
    cells = {(c["method"], c["size"]): c for c in fitted["cells"]}
    for size in ("1x32", "3x64"):
        fit = cells[("peg+fit", size)]
        assert fit["status"] == "done" and fit["details"]["fit"]["fitted"] is True
        assert fit["details"]["fit"]["steps"] == 3
        assert cells[("peg", size)]["details"] == {"learngene": "peg"}  # the unfitted row is not fitted
        assert fit["stores"] == cells[("peg", size)]["stores"] == fitted["learngenes"]["peg"]["parameters"]
    reused = {m.split(": ")[1].split(":")[0] for m in messages if m.endswith("done before, reused")}
    finished = {f"{c['method']}@{c['size']}" for c in report["cells"] if c["status"] == "done"}
    assert reused == finished and len(finished) == 5  # n/a cells are tried again
    assert sum("condensing a peg" in m for m in messages) == 1  # one learngene for both rows
    assert "fit steps per size" in markdown_table(fitted).split("| peg+fit |")[1].split("\n")[0]


def test_a_fitted_row_needs_fit_steps(ancestry, tmp_path):
    with pytest.raises(UsageError, match="--fit-steps"):
        bench(ancestry, "fashion-mnist-mini", tmp_path / "r", settings(methods=["peg+fit"]))


def test_a_kind_that_reaches_no_size_is_not_condensed(first_run, ancestry, tmp_path):
    """TLEG builds its own width only: at 3 x 64 alone it reaches nothing, so
    the bench says so without paying for a condense run, in the words `lg
    grow` gives for the condensed learngene (first_run's, at 3 x 64)."""
    from lgcli.learngene_files import load_learngene
    from lgcli.resize import expand_target

    messages: list[str] = []
    report = bench(ancestry, "fashion-mnist-mini", tmp_path / "bench", settings(sizes=[(3, 64)], methods=["tleg"]),
                   notify=messages.append)
    (cell,) = [c for c in report["cells"] if c["method"] == "tleg"]
    with pytest.raises(LgError) as refused:
        expand_target(load_learngene(first_run[0] / "learngenes" / "tleg.lg.safetensors"), depth=3, width=64)
    assert cell["status"] == "n/a" and cell["reason"] == str(refused.value)
    assert not any("condensing" in m for m in messages)
    folder = tmp_path / "bench" / "learngenes"
    assert not folder.exists() or not any(folder.iterdir())
    assert "tleg" not in report["learngenes"] and report["costs"]["tleg"]["total_seconds"] == 0.0
    plan = bench(ancestry, "fashion-mnist-mini", tmp_path / "plan", settings(sizes=[(3, 64)], methods=["tleg"]),
                 dry_run=True)
    assert plan["condense"] == {} and (plan["cells_not_applicable"], plan["cells_to_run"]) == (1, 1)  # random runs


def test_a_cells_long_scoring_passes_say_how_long(ancestry, tmp_path, monkeypatch):
    """Each cell is probed as lg eval probes: a scoring pass that its first
    batch says is long (a real model on a CPU) says how long, and so does
    every later pass of the cell's curve (fake clock: 10 s a reading)."""
    from lgcli import pace

    clock = iter(range(0, 10**7, 10))
    monkeypatch.setattr(pace, "clock", lambda: float(next(clock)))
    monkeypatch.setattr(pace, "ANNOUNCE_PASS_ABOVE_SECONDS", 1.0)
    messages: list[str] = []
    bench(ancestry, "fashion-mnist-mini", tmp_path / "bench",
          settings(sizes=parse_sizes("1x32"), methods=["select"], test_subset="300"), notify=messages.append)
    scoring = [m for m in messages if "scoring" in m]
    assert "select: scoring on 300 test images: about 2 s more (--test-subset 25: about 1 s a pass)" in scoring
    assert "select: scoring at step 4 (lr 0.0003): about 12 s" in scoring, scoring
