"""Every resize method writes, tensor for tensor, exactly what it wrote before
the bounded-memory rewrite of reading and writing (tests/data/resize_golden.json,
made by tests/make_resize_golden.py): 4 sources x both directions x 4 sizes x
every method, four non-default option sets, a bf16 source and a PEG learngene.
A refused case must still be refused with the same message."""

from __future__ import annotations

import json

import pytest

import make_resize_golden as golden

CASES = json.loads(golden.GOLDEN.read_text())


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("golden")
    paths = golden.sources(folder)
    from lgcli.condense import CondenseSettings, condense_file

    paths["peg"] = folder / "peg.lg.safetensors"
    condense_file(paths["plain"], paths["peg"], method="peg", settings=CondenseSettings(seed=1),
                  notify=lambda m: None)
    return paths


def all_cases():
    for case in golden.cases():
        yield golden.case_name(*case), case
    for size in [(6, 96), (2, 32)]:
        yield f"peg {size[0]}x{size[1]}", ("peg", "grow", size, None, {})


@pytest.mark.parametrize("name,case", list(all_cases()), ids=[name for name, _ in all_cases()])
def test_outputs_are_what_they_were(name, case, sources, tmp_path):
    source, direction, size, method, options = case
    found = golden.run_case(sources[source], tmp_path / "out.safetensors", direction, size, method, options)
    assert found == CASES[name]


def test_the_record_covers_every_method():
    from lgcli.methods import METHODS

    written = {name.split(" ")[3] for name, value in CASES.items() if isinstance(value, dict) and
               not name.startswith("peg")}
    assert written == set(METHODS)
    assert sum(isinstance(v, dict) for v in CASES.values()) >= 170
