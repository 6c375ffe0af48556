"""`lg bench -o DIR` never replaces what is not its own, nor another
experiment's results, without `--force`: a folder is lg's by what its files
hold (a `bench.json` lg wrote, lg's cells and learngenes, PNG figures), not
by their names; a folder holding a bench of another ancestry is refused. A
size no model has (not even the random baseline's) is refused up front, by
the run as by its dry run, and `--condense-steps` beside a `--budget` that
overrides it is a usage error."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import timm
import torch

import lgcli
import test_bench

ancestry = test_bench.ancestry  # the fixture: test_bench's tiny 2 x 32 ViT ancestry, two heads of 16

# The tiniest bench that finishes: select and random at one size, one probe step.
TINY = ("--data", "fashion-mnist-mini", "--sizes", "1x32", "--methods", "select", "--steps", "1", "--batch-size",
        "16", "--subset", "64", "--test-subset", "16")
REFUSED = ("holds {name}, which lg bench did not write; give a new or empty folder, or pass --force to write into "
           "it anyway (lg replaces only the files it names as its own there and leaves every other file as it is)")


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.code == 1 and lines and lines[-1].startswith("lg: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[-1].removeprefix("lg: error: ")


@pytest.fixture(scope="module")
def finished(ancestry, tmp_path_factory):
    """A folder holding a finished tiny bench of `ancestry`."""
    from conftest import run_lg_inproc

    out = tmp_path_factory.mktemp("finished") / "bench"
    result = run_lg_inproc("bench", ancestry, *TINY, "-o", out)
    assert result.code == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def other_ancestry(tmp_path_factory):
    """Another model of the same shape: another experiment's ancestry."""
    torch.manual_seed(1)
    model = timm.create_model("vit_base_patch16_224", **test_bench.ANCESTRY)
    path = tmp_path_factory.mktemp("other") / "other.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


class Marker:
    """Unpickling this touches a file: a bench.json that is a pickle is never unpickled."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


@pytest.mark.parametrize("given", ["json", "text", "pickle", "lg-like"])
def test_a_bench_json_of_the_users_own_is_refused_naming_it_and_kept(lg, ancestry, tmp_path, given):
    """The tour's data loss: a bench.json of the user's beside their
    summary.png made the folder lg's, and both were replaced."""
    out = tmp_path / "r1"
    out.mkdir()
    marker = tmp_path / "unpickled"
    (out / "bench.json").write_bytes({
        "json": b'{"my": "results"}',
        "text": b"MYJSON\n",
        "pickle": pickle.dumps(Marker(marker)),
        # lg's version and lists, but no ancestry record: not one lg bench wrote
        "lg-like": json.dumps({"version": 1, "ancestry": {"file": "a.safetensors"}, "sizes": [], "methods": [],
                               "cells": []}).encode()}[given])
    (out / "summary.png").write_bytes(b"MYPNG\n")
    before = contents(out)
    for dry in ((), ("--dry-run",)):
        result = lg("bench", ancestry, *TINY, "-o", out, *dry)
        assert one_error_line(result) == f"{out}: " + REFUSED.format(name="bench.json"), dry
        assert contents(out) == before and not marker.exists()


@pytest.mark.parametrize("name, text", [("cells/select@1x32.json", b'{"my": "cell"}'),
                                        ("cells/random@1x32.json", b'{"key": "mine", "method": "random"}'),
                                        ("learngenes/tleg.json", b'{"my": "notes"}'),
                                        ("learngenes/tleg.lg.safetensors", b"not a learngene"),
                                        ("summary.png", b"MYPNG\n"),
                                        ("curves_1x32.png", b"my own curves\n")])
def test_a_file_under_an_lg_name_that_lg_did_not_write_is_refused_in_an_lg_folder(lg, ancestry, finished, tmp_path,
                                                                                   name, text):
    """Beside a bench.json lg wrote, each file is lg's only where it holds
    what lg writes there: a cell of its own name, a learngene, a PNG."""
    out = tmp_path / "bench"
    shutil.copytree(finished, out)
    (out / name).parent.mkdir(exist_ok=True)
    (out / name).write_bytes(text)
    before = contents(out)
    result = lg("bench", ancestry, *TINY, "-o", out)
    assert one_error_line(result) == f"{out}: " + REFUSED.format(name=name)
    assert contents(out) == before


def test_a_cell_of_another_name_is_not_lg_s(lg, ancestry, finished, tmp_path):
    """A cell lg wrote, copied under another cell's name, is not that cell."""
    out = tmp_path / "bench"
    shutil.copytree(finished, out)
    shutil.copy(out / "cells" / "random@1x32.json", out / "cells" / "select@1x32.json")
    result = lg("bench", ancestry, *TINY, "-o", out, "--dry-run")
    assert one_error_line(result) == f"{out}: " + REFUSED.format(name="cells/select@1x32.json")


def test_lg_s_own_folder_is_resumed_and_force_still_writes_into_a_foreign_one(lg, ancestry, finished, tmp_path):
    out = tmp_path / "bench"
    shutil.copytree(finished, out)
    again = lg("bench", ancestry, *TINY, "-o", out)
    assert again.code == 0 and again.stderr.count("done before, reused") == 2, again.stderr
    (out / "notes.txt").write_text("mine\n")
    (out / "bench.json").write_text('{"my": "results"}')
    forced = lg("bench", ancestry, *TINY, "-o", out, "--force")
    assert forced.code == 0, forced.stderr
    # --force replaces the files lg names as its own, and no other.
    assert (out / "notes.txt").read_text() == "mine\n"
    assert json.loads((out / "bench.json").read_text())["version"] == 1


def test_a_bench_of_another_ancestry_is_refused_naming_both(lg, ancestry, other_ancestry, finished, tmp_path):
    """Another ancestry is another experiment: it does not silently replace
    the folder's results; --force does, as before."""
    out = tmp_path / "bench"
    shutil.copytree(finished, out)
    before = contents(out)
    recorded = json.loads((out / "bench.json").read_text())["ancestry"]["sha256"]
    this = lgcli.load(other_ancestry).checkpoint.sha256
    expected = (f"{out}: holds a bench of {ancestry} (sha256 {recorded[:12]}...), not of {other_ancestry} (sha256 "
                f"{this[:12]}...): give another -o, or --force to replace its results")
    for dry in ((), ("--dry-run",)):
        result = lg("bench", other_ancestry, *TINY, "-o", out, *dry)
        assert one_error_line(result) == expected, dry
        assert contents(out) == before
    # A run stopped before its report: the cells say whose bench it is.
    (out / "bench.json").unlink()
    assert one_error_line(lg("bench", other_ancestry, *TINY, "-o", out, "--dry-run")) == expected
    # Its own ancestry resumes it.
    assert lg("bench", ancestry, *TINY, "-o", out, "--dry-run").code == 0
    forced = lg("bench", other_ancestry, *TINY, "-o", out, "--force")
    assert forced.code == 0, forced.stderr
    assert json.loads((out / "bench.json").read_text())["ancestry"]["sha256"] == this
    assert all(json.loads(p.read_text())["ancestry"]["sha256"] == this for p in (out / "cells").iterdir())


@pytest.mark.parametrize("sizes", ["3x100", "1x32,3x100"])
def test_a_size_no_model_has_is_refused_by_the_run_as_by_the_dry_run(lg, ancestry, tmp_path, sizes, monkeypatch):
    """Width 100 is no whole number of the ancestry's heads of 16: not even
    random builds it. The run wrote a folder of n/a cells and exited 0."""
    import lgcli.bench

    def no_cell(*args, **kwargs):
        raise AssertionError("a cell was run")

    monkeypatch.setattr(lgcli.bench, "_run_cell", no_cell)
    out = tmp_path / "r2"
    args = ("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", sizes, "--methods", "select,random",
            "-o", out)
    expected = "width 100 is not a whole number of heads of dimension 16 (valid widths: 64, 80, 96, 112, 128, 144, ...)"
    assert one_error_line(lg(*args)) == one_error_line(lg(*args, "--dry-run")) == expected
    assert not out.exists()


@pytest.mark.parametrize("given", [("--condense-steps", "3"), ("--condense-steps", "tleg=2,wave=3"),
                                   ("--condense-steps", "600")])
def test_condense_steps_beside_another_budget_is_a_usage_error(lg, ancestry, tmp_path, given):
    """--budget gives every path its steps, a condense run's too: the
    --condense-steps given beside it were silently ignored."""
    out = tmp_path / "out"
    for dry in ((), ("--dry-run",)):
        result = lg("bench", ancestry, *TINY, *given, "--budget", "2", "-o", out, *dry)
        lines = result.stderr.strip().splitlines()
        assert result.code == 2 and len(lines) == 1, result.stderr
        assert lines[0] == (f"lg: error: --condense-steps {given[1]} beside --budget 2: --budget sets the condense "
                            f"steps too (every path gets 2 training steps, a learngene's condense run included); "
                            f"give one of them")
        assert not out.exists()


@pytest.mark.parametrize("given, budget, steps", [(("--condense-steps", "2"), 2, 2), ((), 2, 2),
                                                  (("--condense-steps", "tleg=2"), 2, 2),
                                                  (("--condense-steps", "5"), None, 5)])
def test_condense_steps_the_budget_agrees_with_or_without_a_budget_are_taken(lg, ancestry, tmp_path, monkeypatch,
                                                                             given, budget, steps):
    import lgcli.bench

    seen = []

    def fake_bench(ancestry, data, out, settings, **kwargs):
        seen.append(settings)
        raise lgcli.errors.LgError("stopped by the test")

    monkeypatch.setattr(lgcli.bench, "bench", fake_bench)
    with_budget = ("--budget", str(budget)) if budget is not None else ()
    result = lg("bench", ancestry, *TINY, *given, *with_budget, "-o", tmp_path / "out")
    assert result.code == 1 and "stopped by the test" in result.stderr, result.stderr
    (settings,) = seen
    assert settings.budget == budget and settings.condense_budget("tleg") == steps


def test_bench_json_records_the_condense_steps_that_ran():
    """Under --budget N a learngene condenses for N: bench.json says N, not the condense steps' default."""
    from lgcli.bench_settings import BenchSettings
    from lgcli.options import DEFAULT_CONDENSE_STEPS

    assert BenchSettings(sizes=[(2, 64)], budget=2).recorded()["condense_steps"] == 2
    assert BenchSettings(sizes=[(2, 64)]).recorded()["condense_steps"] == DEFAULT_CONDENSE_STEPS
    assert BenchSettings(sizes=[(2, 64)], condense_steps={"tleg": 5}).recorded()["condense_steps"] == {"tleg": 5}
