"""`lg bench --condense-option KIND:OPTION=VALUE`: any of `lg condense`'s
options for one kind's condense run (SWS's --stages and --stage-map, TLEG's
--alpha, ...), checked against the kind's declarations before anything runs,
in the learngene's reuse key, and recorded in bench.json."""

from __future__ import annotations

import json

import pytest

import test_bench
from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.bench_settings import parse_condense_options
from lgcli.errors import UsageError
from lgcli.evaluate import ProbeSettings

ancestry = test_bench.ancestry  # the fixture: test_bench's tiny 2 x 32 ancestry, two heads of 16


def settings(**overrides) -> BenchSettings:
    base = dict(sizes=parse_sizes("1x32,2x32"), methods=["sws"],
                probe=ProbeSettings(steps=2, eval_every=2, batch_size=16, progress=False), **test_bench.FAST)
    return BenchSettings(**{**base, **overrides})


def test_the_flag_parses_kind_option_and_value_with_or_without_dashes():
    assert parse_condense_options(["sws:stage-map=angular", "sws:--stages=3", " tleg : width-norms = TRUE "]) == {
        "sws": {"stage_map": "angular", "stages": "3"}, "tleg": {"width_norms": True}}
    assert parse_condense_options(None) == {} and parse_condense_options([]) == {}
    # A value keeps its inner characters (a list of depths).
    assert parse_condense_options(["sws:depths=3,6,12"]) == {"sws": {"depths": "3,6,12"}}


@pytest.mark.parametrize("text", ["sws", "sws:stages", "stages=3", "sws:stages=", "SWS:stages=3", "sws:=3"])
def test_a_malformed_option_is_refused_naming_the_form(text):
    with pytest.raises(UsageError, match="--condense-option takes KIND:OPTION=VALUE"):
        parse_condense_options([text])


def test_the_same_option_twice_is_refused():
    with pytest.raises(UsageError, match="gives sws:stages twice"):
        parse_condense_options(["sws:stages=2", "sws:--stages=3"])


@pytest.mark.parametrize("given, message", [
    ({"swz": {"stages": "2"}}, "no learngene kind 'swz'"),
    ({"sws": {"stagess": "2"}}, "--stagess does not apply to learngene kind 'sws' (it takes --alpha"),
    ({"sws": {"stages": "0"}}, "--stages"),
    ({"sws": {"stages": "two"}}, "--stages takes a whole number, not 'two'"),
    ({"sws": {"stage_map": "cosine"}}, "--stage-map must be one of rule, "),
    ({"tleg": {"alpha": "0.5"}}, "--condense-option tleg:... is for a kind --methods does not bench"),
])
def test_a_kind_option_or_value_the_kind_refuses_is_refused_before_anything_runs(given, message):
    with pytest.raises(UsageError) as raised:
        settings(condense_options=given)
    assert message in str(raised.value)


@pytest.mark.parametrize("flag, option", [("learngene_widths", "widths"), ("learngene_widths", "width_rule"),
                                          ("learngene_depths", "depths")])
def test_an_option_a_bench_flag_sets_is_refused_beside_it(flag, option):
    value = {"widths": "16,32", "width_rule": "sandwich", "depths": "1-2"}[option]
    with pytest.raises(UsageError, match=f"sets sws's --{option.replace('_', '-')}: give --"):
        settings(condense_options={"sws": {option: value}}, **{flag: True})


def test_values_are_checked_into_their_types_and_join_the_kind_options_and_key(ancestry):
    from lgcli.loading import load_model

    _, spec = load_model(ancestry)
    given = {"sws": {"stages": "1", "alpha": "0.25"}}
    asked = settings(condense_options=given, learngene_depths=True)
    assert asked.condense_options == {"sws": {"stages": 1, "alpha": 0.25}}
    assert given == {"sws": {"stages": "1", "alpha": "0.25"}}  # the caller's dict is left as it was
    assert asked.learngene_options("sws", spec) == {"stages": 1, "alpha": 0.25, "depths": "1-2"}
    assert asked.condense_key("sws", spec)["options"] == {"stages": 1, "alpha": 0.25, "depths": "1-2"}
    # Another kind's options and key are untouched (the key earlier versions wrote).
    both = settings(methods=["sws", "tleg"], condense_options={"sws": {"stages": 1}})
    assert both.learngene_options("tleg", spec) == {} and "options" not in both.condense_key("tleg", spec)


def test_the_learngene_is_condensed_with_the_options_and_recondensed_when_they_change(ancestry, tmp_path):
    from lgcli.learngene_files import load_learngene

    out = tmp_path / "bench"
    path = out / "learngenes" / "sws.lg.safetensors"
    one = bench(ancestry, "fashion-mnist-mini", out, settings(condense_options={"sws": {"stages": 1}}),
                notify=lambda m: None)
    assert {c["status"] for c in one["cells"]} == {"done"}
    assert one["settings"]["condense_options"] == {"sws": {"stages": 1}}
    assert json.loads((out / "bench.json").read_text())["settings"]["condense_options"] == {"sws": {"stages": 1}}
    assert load_learngene(path).sizes["stages"] == 1
    # The same bench again reuses the learngene; another stage count condenses a new one.
    notes: list[str] = []
    bench(ancestry, "fashion-mnist-mini", out, settings(condense_options={"sws": {"stages": 1}}), notify=notes.append)
    assert not any("condensing" in note for note in notes)
    bench(ancestry, "fashion-mnist-mini", out, settings(condense_options={"sws": {"stages": 2}}), notify=notes.append)
    assert any("bench: condensing a sws learngene" in note for note in notes)
    assert load_learngene(path).sizes["stages"] == 2


def test_the_command_line_passes_each_option_and_refuses_a_bad_one_in_one_line(lg, ancestry, tmp_path):
    out = tmp_path / "out"
    common = ("--data", "fashion-mnist-mini", "--sizes", "1x32", "--methods", "sws", "--steps", "1",
              "--condense-steps", "1", "--subset", "64", "--test-subset", "16", "--batch-size", "16")
    result = lg("bench", ancestry, *common, "--condense-option", "sws:stages=1", "--condense-option",
                "sws:alpha=1", "-o", out, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["settings"]["condense_options"] == {"sws": {"stages": 1, "alpha": 1.0}}
    bad = lg("bench", ancestry, *common, "--condense-option", "sws:stage-map=cosine", "-o", tmp_path / "bad")
    lines = bad.stderr.strip().splitlines()
    assert bad.code == 2 and len(lines) == 1 and lines[0].startswith("lg: error: --stage-map must be one of")
    assert not (tmp_path / "bad").exists()
