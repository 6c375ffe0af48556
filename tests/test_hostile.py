"""Hostile inputs, generated from a fixed seed: lg refuses them in one clean
line (or handles them), never crashes, hangs, eats memory, leaves files
behind, modifies an input or runs a pickle's code.

The cases and the runner live in tests/hostile_cases.py; to see every failing
case of a family at once:

    .venv/bin/python tests/hostile_cases.py --report --family headers
"""

from __future__ import annotations

import pytest

import hostile_cases as hc

# Each family should hold a comparable share of the cases.
MIN_CASES, MAX_CASES = 30, 110


class Generated(tuple):
    """(root, fixtures, cases by family), shown briefly in pytest's tracebacks."""

    def __repr__(self) -> str:
        return f"<hostile cases in {self[0]}: {sum(map(len, self[2].values()))}>"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Fixture files, and every family's cases generated once (seeded)."""
    root = tmp_path_factory.mktemp("hostile")
    fixtures = hc.build_fixtures(root)
    cases = {family: hc.generate(family, root, fixtures, hc.SEED) for family in hc.FAMILIES}
    return Generated((root, fixtures, cases))


def test_case_counts(hostile):
    _, fixtures, cases = hostile
    counts = {family: len(found) for family, found in cases.items()}
    print("hostile cases per family:", counts, "total", sum(counts.values()), *fixtures.notes)
    assert counts == hc.CASE_COUNTS
    assert fixtures.gene is not None, fixtures.notes  # the learngene fixture (lg condense) must build
    for family, count in counts.items():
        assert MIN_CASES <= count <= MAX_CASES, f"{family}: {count} cases"
    for family, found in cases.items():
        expects = {case.expect for case in found}
        assert "error" in expects and expects & {"ok", "either"}, f"{family} lacks controls or refusals"
        assert len({case.name for case in found}) == len(found)


@pytest.mark.parametrize("family", hc.FAMILIES)
def test_hostile_family(hostile, family):
    _, _, cases = hostile
    outcomes = hc.run_cases(cases[family])
    assert len(outcomes) == len(cases[family])
    assert all(outcome.passed for outcome in outcomes), hc.failure_message(outcomes)


def test_library_rejects_imply_lg_rejects(hostile):
    """Bytes the safetensors library refuses, lg refuses too (LgError), read
    from a file (lg's own header parser and memory map) and from memory. Runs
    in a forked copy of this process, so a hang or a crash cannot stall pytest."""
    root, fixtures, _ = hostile
    count, failures = hc.run_library_check(fixtures, root, hc.SEED)
    assert count >= 150
    message = "\n".join(failures[:40]) + (f"\n... and {len(failures) - 40} more" if len(failures) > 40 else "")
    assert not failures, f"{len(failures)} of {2 * count} reads did not raise LgError:\n{message}"
