"""`lg methods`: the resize methods and learngene kinds as their registries
list them (a registry entry added or removed changes it), each with exactly
its declared options, as JSON and as tables that fit 80 columns."""

from __future__ import annotations

import json

import pytest
from rich.cells import cell_len

from lgcli.learngenes import KINDS
from lgcli.learngenes.base import LearngeneKind
from lgcli.methods import DEFAULT_METHODS, GROW, METHODS, SHRINK, Method
from lgcli.options import Option

WIDTHS = (80, 120)


def listed(lg, *args) -> dict:
    result = lg("methods", "--json", *args)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)  # stdout: the JSON and nothing else


def table(lg, monkeypatch, width: int) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    result = lg("methods")
    assert result.code == 0 and result.stderr == "", result.stderr
    return result.stdout.decode()


def rows_of(text: str, names: set[str]) -> dict[str, list[str]]:
    """The words of each row (by its name) of the tables in `text`: a row
    starts on a line whose first word is a name and goes on over the
    indented lines under it."""
    rows: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            first = line.split()[0]
            name = first if first in names else None
            if name:
                rows[name] = line.split()[1:]
            continue
        if name:
            rows[name] += line.split()
    return rows


def flags_shown(words: list[str]) -> list[str]:
    """`--qkv-axis=heads` -> --qkv-axis, `--[no-]fit-globals` -> --fit-globals."""
    return [word.split("=")[0].replace("[no-]", "") for word in words if word.startswith("--")]


def test_the_json_lists_every_registry_entry_with_its_declared_options(lg):
    report = listed(lg)
    assert [method["name"] for method in report["methods"]] == list(METHODS)
    assert [kind["name"] for kind in report["learngenes"]] == list(KINDS)
    for entry in report["methods"]:
        method = METHODS[entry["name"]]
        assert entry["directions"] == list(method.directions) and entry["description"] == method.summary
        assert entry["direction"] == ("both" if len(method.directions) == 2 else method.directions[0])
        assert entry["default_for"] == [d for d, name in DEFAULT_METHODS.items() if name == method.name]
        assert [(o["name"], o["flag"], o["type"], o["default"]) for o in entry["options"]] == \
               [(o.name, o.flag, o.type.__name__, o.default) for o in method.options]
    for entry in report["learngenes"]:
        kind = KINDS[entry["name"]]
        assert entry["description"] == kind.summary and entry["trains"] == kind.trains
        assert [o["name"] for o in entry["condense_options"]] == [o.name for o in kind.condense_options]
        assert [o["name"] for o in entry["grow_options"]] == [o.name for o in kind.expand_options]
    assert {"select": [SHRINK], "clone": [GROW]} == {e["name"]: e["default_for"] for e in report["methods"]
                                                   if e["default_for"]}
    assert {"auto-lg": [GROW]} == {e["name"]: e["fallback_for"] for e in report["methods"] if e["fallback_for"]}
    assert {"block-ablation": ["depth"], "activation": ["width"]} == \
           {e["name"]: e["calibrated_default_for"] for e in report["methods"] if e["calibrated_default_for"]}


class _Kind(LearngeneKind):
    name = "test-kind"
    summary = "a kind only this test registers"
    condense_options = (Option("knob", int, 3, "a knob"),)
    expand_options = (Option("dial", str, None, "a dial"),)


def test_an_entry_added_or_removed_in_a_registry_changes_the_list(lg, monkeypatch):
    method = Method("test-method", run=lambda *args: None, directions=(GROW,), summary="a method only this test adds",
                    options=(Option("test_knob", float, 0.5, "a knob"),))
    monkeypatch.setitem(METHODS, "test-method", method)
    monkeypatch.setitem(KINDS, "test-kind", _Kind())
    monkeypatch.delitem(METHODS, "bot")
    monkeypatch.delitem(KINDS, "peg")
    report = listed(lg)
    assert [m["name"] for m in report["methods"]] == list(METHODS) and "bot" not in list(METHODS)
    added = report["methods"][-1]
    assert (added["name"], added["direction"], added["description"]) == ("test-method", "grow",
                                                                         "a method only this test adds")
    assert [o["flag"] for o in added["options"]] == ["--test-knob"]
    assert [k["name"] for k in report["learngenes"]] == ["tleg", "wave", "sws", "lets", "test-kind"]
    monkeypatch.setenv("COLUMNS", "80")
    text = lg("methods").stdout.decode()
    rows = rows_of(text, set(METHODS) | set(KINDS) | {"bot", "peg"})
    assert "bot" not in rows and "peg" not in rows
    assert flags_shown(rows["test-method"]) == ["--test-knob"] and "--test-knob=0.5" in rows["test-method"]
    assert flags_shown(rows["test-kind"]) == ["--knob", "--dial"]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_tables_fit_and_list_each_entrys_own_options(lg, monkeypatch, width):
    text = table(lg, monkeypatch, width)
    assert "…" not in text
    assert all(cell_len(line.rstrip()) <= width for line in text.splitlines()), text
    rows = rows_of(text, set(METHODS) | set(KINDS))
    assert sorted(rows) == sorted([*METHODS, *KINDS])  # every name whole, in a row of its own
    for name, method in METHODS.items():
        words = rows[name]
        assert words[0] == ("both" if len(method.directions) == 2 else method.directions[0])
        assert flags_shown(words) == [option.flag for option in method.options]
        for option in method.options:  # each with its default, as it can be typed
            if option.type is not bool and option.default is not None:
                assert f"{option.flag}={option.default}" in words
        # The description, whole: its words in order (the options column's words share its lines).
        remaining = iter(words)
        assert all(word in remaining for word in method.summary.split()), (name, words)
    for name, kind in KINDS.items():
        words = rows[name]
        condense, grow = words.index("condense:"), words.index("grow:")
        assert flags_shown(words[condense:grow]) == [option.flag for option in kind.condense_options]
        assert flags_shown(words[grow:]) == [option.flag for option in kind.expand_options]
    assert "shrink (default)" in " ".join(rows["select"]) and "grow (default)" in " ".join(rows["clone"])
    for name, axis in (("block-ablation", "depth"), ("activation", "width")):  # lg shrink --calibrate's defaults
        remaining = iter(rows[name])
        assert all(word in remaining for word in f"shrink (default for the {axis} given calibration data)".split())
    remaining = iter(rows["auto-lg"])  # in order; a narrow table interleaves the columns' words
    assert all(word in remaining for word in "both (grow default where clone cannot)".split())
