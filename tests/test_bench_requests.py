"""What `lg bench` is asked: a request it cannot honour as written is
refused in one line before any work (a --fit-steps beside --budget, which
would break equal compute; a method named twice, which the summary read as a
second seed; a --fit-steps no row uses; an empty --methods, once read as
every method; --json with --markdown), and its --dry-run counts every seed's
saved cells and learngenes as the run then uses them."""

from __future__ import annotations

import re
import shutil

import pytest

import test_bench
from test_bench_cli import asked  # noqa: F401  (the fixture: the settings lg bench hands on, nothing run)
from lgcli.bench import BenchSettings, bench
from lgcli.errors import UsageError
from lgcli.evaluate import ProbeSettings

ancestry = test_bench.ancestry  # the fixture: test_bench's two-block ViT ancestry

BENCH = ("--data", "fashion-mnist-mini", "--sizes", "1x32", "--steps", "1", "--subset", "64", "--test-subset", "16")


@pytest.mark.parametrize("given, said", [
    # The fit trains on top of the budget: the fitted row would get more steps than the caption's equal compute.
    (("--methods", "select,wave,wave+fit", "--fit-steps", "3", "--budget", "4"),
     "--fit-steps 3 beside --budget 4: a +fit row's fit steps come on top of the budget every path shares"),
    (("--methods", "peg+fit", "--budget", "4"), "--methods peg+fit beside --budget 4"),
    (("--fit-steps", "3", "--budget", "0"), "--fit-steps 3 beside --budget 0"),
    (("--methods", "select,tleg,select"), "--methods names select twice"),
    (("--methods", "random,random"), "--methods names random twice"),
    (("--methods", "wave", "--fit-steps", "3"), "--fit-steps 3 is for the +fit rows, and --methods names none: "
                                                "add wave+fit to --methods"),
    (("--methods", "select", "--fit-steps", "3"), "add wave+fit or peg+fit to --methods"),
    (("--methods", ""), "--methods: give at least one method"),
    (("--methods", " , "), "--methods: give at least one method"),
    (("--methods", "select", "--json", "--markdown"), "give --json or --markdown, not both"),
    (("--methods", "tleg", "--condense-steps", "tleg=2,tleg=3"), "--condense-steps gives tleg twice"),
])
def test_a_request_the_bench_cannot_honour_is_one_line_before_any_work(lg, ancestry, tmp_path, asked, given, said):
    for dry in ((), ("--dry-run",)):
        result = lg("bench", ancestry, *BENCH, *given, "-o", tmp_path / "out", *dry)
        lines = result.stderr.strip().splitlines()
        assert result.code == 2 and len(lines) == 1 and lines[0].startswith("lg: error: "), result.stderr
        assert said in lines[0], lines[0]
    assert not asked and not (tmp_path / "out").exists()  # refused before the bench was called


@pytest.mark.parametrize("given", [("--methods", "wave,wave+fit", "--fit-steps", "3"), ("--fit-steps", "3"),
                                   ("--methods", "select,tleg", "--budget", "2"), ("--methods", "select", "--json")])
def test_the_requests_beside_them_are_taken(lg, ancestry, tmp_path, asked, given):
    """The refusals are narrow: a fitted row with its fit, every method with
    a fit, a budget without one, and one output format all reach the bench."""
    result = lg("bench", ancestry, *BENCH, *given, "-o", tmp_path / "out")
    assert result.code == 1 and "stopped by the test" in result.stderr, result.stderr
    (settings,) = asked
    assert settings.methods is None or len(settings.methods) == len(set(settings.methods))


def test_the_library_refuses_them_too():
    """A bench asked from Python gets the command's refusals (BenchSettings checks them)."""
    probe = ProbeSettings(steps=1)
    for methods, extra, said in ((["tleg", "tleg"], {}, "tleg twice"), ([], {}, "at least one method"),
                                 (["wave+fit"], {"fit_steps": 2, "budget": 2}, "beside --budget 2"),
                                 (["wave"], {"fit_steps": 2}, "add wave+fit")):
        with pytest.raises(UsageError, match=re.escape(said)):
            BenchSettings(sizes=[(1, 32)], methods=methods, probe=probe, **extra)


def _tiny(seeds: int) -> BenchSettings:
    return BenchSettings(sizes=[(1, 32)], methods=["tleg"], seeds=seeds, subset="64", test_subset="16",
                         condense_steps=1, condense_batch_size=16,
                         probe=ProbeSettings(steps=1, eval_every=1, batch_size=16, progress=False))


def _planned_then_run(ancestry, out, seeds: int) -> tuple[dict, dict]:
    """The dry run's counts, then what the same bench did: the cells it
    computed (neither reused nor n/a), reused and condensed."""
    planned = bench(ancestry, "fashion-mnist-mini", out, _tiny(seeds), notify=lambda message: None, dry_run=True)
    messages: list[str] = []
    report = bench(ancestry, "fashion-mnist-mini", out, _tiny(seeds), notify=messages.append)
    reused = sum(m.endswith(": done before, reused") for m in messages)
    done = sum(cell["status"] == "done" for cell in report["cells"])
    ran = {"cells": len(report["cells"]), "to_run": done - reused, "reused": reused,
           "condensed": sum(m.startswith("bench: condensing a tleg learngene") for m in messages)}
    counted = {"cells": planned["cells"], "to_run": planned["cells_to_run"], "reused": planned["cells_reused"],
               "condensed": planned["condense"].get("tleg", {}).get("runs", 0)}
    # The steps the plan counts are those cells' probes and those condense runs.
    assert planned["steps"] == counted["to_run"] * 1 + counted["condensed"] * 1
    return counted, ran


def test_a_dry_run_counts_every_seeds_saved_cells_as_the_run_uses_them(ancestry, tmp_path):
    """The plan looked up the first seed's cells and stood them for every
    seed: a seed whose cells were removed, or a seed added since, was said to
    be saved, and the run then computed its cells and condensed its learngene."""
    out = tmp_path / "bench"
    counted, ran = _planned_then_run(ancestry, out, seeds=2)  # fresh: tleg and random, each seed, each condensing
    assert counted == ran == {"cells": 4, "to_run": 4, "reused": 0, "condensed": 2}
    # The first seed's cells removed (its learngene kept), and the second
    # seed's learngene removed (its cells kept, so nothing needs it).
    for path in [*(out / "cells").glob("*~seed0.json"), *(out / "learngenes").glob("tleg-seed1.*")]:
        path.unlink()
    counted, ran = _planned_then_run(ancestry, out, seeds=2)
    assert counted == ran == {"cells": 4, "to_run": 2, "reused": 2, "condensed": 0}
    # A third seed: its cells and its learngene are new; the others' stand.
    counted, ran = _planned_then_run(ancestry, out, seeds=3)
    assert counted == ran == {"cells": 6, "to_run": 2, "reused": 4, "condensed": 1}


def test_a_forced_dry_run_counts_the_condense_runs_force_repeats(ancestry, tmp_path):
    """--force condenses every learngene again, saved or not: the plan counts them."""
    out = tmp_path / "bench"
    bench(ancestry, "fashion-mnist-mini", out, _tiny(2), notify=lambda message: None)
    forced = _tiny(2)
    forced.force = True
    planned = bench(ancestry, "fashion-mnist-mini", shutil.copytree(out, tmp_path / "copy"), forced,
                    notify=lambda message: None, dry_run=True)
    assert (planned["cells_to_run"], planned["cells_reused"], planned["condense"]["tleg"]["runs"]) == (4, 0, 2)
