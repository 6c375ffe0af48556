"""A user audit's findings, each checked as the user met it: a shrink to a
larger width said to be one first, and the widths a refusal lists only
those its command reaches; --memory's refusal offering only what it takes;
the key/value heads in a resize's plan and done lines; a bench refused for
data smaller than one batch leaving no folder behind; and --method's help
naming the learngenes that take it."""

from __future__ import annotations

import json
import re
import shlex

import pytest

import lgcli
import lgcli.bench as bench_module
from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.errors import LgError, counted
from lgcli.evaluate import ProbeSettings
from lgcli.methods.common import GROW, SHRINK
from lgcli.sizing import MixedChange, target_spec

from conftest import make_vit
from text_models import Sources

# A grouped-query Llama in the shape of the audit's SmolLM2 (9 heads of 64
# over 3 key/value heads), shrunk: 6 heads of dimension 8 over 2 key/value
# heads, so groups of 3 as there.
GROUPS_OF_3 = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=96)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return Sources(tmp_path_factory)


@pytest.fixture(scope="module")
def gqa(sources):
    """The grouped-query Llama's folder and its spec."""
    folder, _ = sources("llama-gqa", **GROUPS_OF_3)
    return folder, lgcli.load(folder).spec


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    """A ViT 128 wide of 2 heads of dimension 64, as the audit's example ViT."""
    path = tmp_path_factory.mktemp("vit") / "vit.safetensors"
    lgcli.save_model(make_vit(embed_dim=128, num_heads=2), path)
    return path


def only_line(result) -> str:
    """The one line a refusal prints, checked to be one, with no traceback."""
    assert result.code != 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------- 1. the direction first, the widths it reaches

def test_a_shrink_to_a_larger_width_is_refused_as_one_before_its_heads_are_checked(gqa):
    """88 = 11 heads of 8: the source's groups of 3 do not divide them, but
    what is wrong first is the direction; the refusal carries the grow's
    target, with the key/value heads nearest the source's that a grow reaches."""
    _, spec = gqa
    with pytest.raises(MixedChange) as refused:
        target_spec(spec, width=88, direction=SHRINK)
    assert refused.value.what == ("shrink cannot make the width larger (48 -> 88), and 11 heads do not form groups "
                                  "of 3 as the source's do: the command below gives them 11 key/value heads "
                                  "(--kv-heads)")
    target = refused.value.target
    assert (target.width, target.heads, target.key_value_heads) == (88, 11, 11)
    with pytest.raises(MixedChange, match=r"^shrink cannot make the width larger \(48 -> 72\): use `lg grow`$"):
        target_spec(spec, width=72, direction=SHRINK)  # 9 heads in groups of 3: the grow builds it as asked


def test_a_shrink_to_a_larger_width_of_no_whole_heads_names_the_grow_and_its_widths(gqa):
    _, spec = gqa
    with pytest.raises(LgError) as refused:
        target_spec(spec, width=100, direction=SHRINK)
    assert str(refused.value) == ("shrink cannot make the width larger (48 -> 100); lg grow makes it larger, but not "
                                  "at these sizes either: width 100 is not a whole number of heads of dimension 8 "
                                  "(valid widths: 48, 72, 96, 120, 144, 168, ...; or pass --heads)")


@pytest.mark.parametrize("direction, width, kv_heads, valid", [
    # A shrink: no wider than the source, in groups of 3 (or of the key/value heads given).
    (SHRINK, 20, None, "24, 48"),
    (SHRINK, 20, 1, "8, 16, 24, 32, 40, 48"),
    (SHRINK, 20, 2, "16, 32, 48"),
    # A grow: no narrower than the source.
    (GROW, 52, None, "48, 72, 96, 120, 144, 168, ..."),
    (GROW, 52, 6, "48, 96, 144, 192, 240, 288, ..."),
    # Either (lg bench, condense): both sides, in groups of 3.
    (None, 20, None, "24, 48, 72, 96, 120, 144, ..."),
])
def test_the_valid_widths_listed_are_those_the_command_reaches(gqa, direction, width, kv_heads, valid):
    _, spec = gqa
    with pytest.raises(LgError) as refused:
        target_spec(spec, width=width, kv_heads=kv_heads, direction=direction)
    assert str(refused.value) == (f"width {width} is not a whole number of heads of dimension 8 (valid widths: "
                                  f"{valid}; or pass --heads)")


def test_every_width_a_shrink_lists_is_one_it_builds(gqa):
    _, spec = gqa
    with pytest.raises(LgError) as refused:
        target_spec(spec, width=20, direction=SHRINK)
    listed = re.search(r"valid widths: ([0-9, ]+)", str(refused.value))[1].split(", ")
    for width in map(int, listed):
        target = target_spec(spec, width=width, direction=SHRINK)
        assert target.width == width <= spec.width


def test_heads_a_shrink_cannot_group_name_the_key_value_heads_it_reaches(gqa):
    _, spec = gqa
    with pytest.raises(LgError) as refused:
        target_spec(spec, width=16, direction=SHRINK)
    assert str(refused.value) == ("2 heads do not form groups of 3 (the source's 6 heads share 2 key/value heads): "
                                  "give --kv-heads, one that divides 2 and is at most the source's 2: 1, 2")
    assert target_spec(spec, width=16, kv_heads=1, direction=SHRINK).key_value_heads == 1


def test_a_vit_shrink_lists_no_width_above_its_own(vit):
    spec = lgcli.load(vit).spec
    with pytest.raises(LgError) as refused:
        target_spec(spec, width=100, direction=SHRINK)
    assert str(refused.value) == ("width 100 is not a whole number of heads of dimension 64 (valid widths: 64, 128; "
                                  "or pass --heads)")


# The CLI's refusals: these need lg shrink to hand its direction to
# target_spec (lgcli/resize.py plan_resize).

def test_lg_shrink_to_a_larger_width_says_so_and_its_hint_runs(gqa, lg, tmp_path):
    folder, _ = gqa
    out = tmp_path / "y"
    line = only_line(lg("shrink", folder, "--width", "88", "-o", out))
    hint = (f"lg grow {shlex.quote(str(folder))} --depth 3 --width 88 --heads 11 --mlp-dim 176 --kv-heads 11 "
            f"-o {shlex.quote(str(out))}")
    assert line == ("lg: error: shrink cannot make the width larger (48 -> 88), and 11 heads do not form groups of 3 "
                    f"as the source's do: the command below gives them 11 key/value heads (--kv-heads); run: {hint}")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    ran = lg(*shlex.split(hint)[1:])
    assert ran.code == 0, ran.stderr
    assert json.loads((out / "config.json").read_text())["num_key_value_heads"] == 11


def test_lg_shrink_lists_only_widths_it_reaches(gqa, vit, lg, tmp_path):
    folder, _ = gqa
    out = tmp_path / "y"
    assert only_line(lg("shrink", folder, "--width", "20", "-o", out)) == (
        "lg: error: width 20 is not a whole number of heads of dimension 8 (valid widths: 24, 48; or pass --heads)")
    assert only_line(lg("shrink", vit, "--width", "100", "-o", out)) == (
        "lg: error: width 100 is not a whole number of heads of dimension 64 (valid widths: 64, 128; or pass "
        "--heads)")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- 2. --memory offers what it takes

@pytest.mark.parametrize("given", ["abc", "0", "0MB"])
def test_memory_is_refused_no_size_in_words_that_offer_only_sizes(vit, lg, tmp_path, given):
    result = lg("shrink", vit, "--memory", given, "-o", tmp_path / "y.safetensors")
    assert result.code == 2
    assert only_line(result) == f"lg: error: --memory takes a size such as 200MB or 1GiB, not '{given}'"
    assert list(tmp_path.iterdir()) == []


def test_shard_size_keeps_its_no_limit_and_says_so(vit, lg, tmp_path):
    refused = lg("shrink", vit, "--depth", "1", "--shard-size", "abc", "-o", tmp_path / "y.safetensors")
    assert only_line(refused) == ("lg: error: --shard-size takes a size such as 5GB, 500MB or 2GiB (or 0 for no "
                                  "limit), not 'abc'")
    assert lg("shrink", vit, "--depth", "1", "--shard-size", "0", "--dry-run").code == 0


# ---------------------------------------------------------------- 3. key/value heads in the plan and done lines

def test_the_plan_and_done_lines_show_the_key_value_heads(gqa, lg, tmp_path):
    folder, _ = gqa
    plan = lg("shrink", folder, "--kv-heads", "1", "--dry-run", "--json")
    assert plan.code == 0, plan.stderr
    assert "depth 3 -> 3, width 48 -> 48, heads 6 -> 6, kv heads 2 -> 1, mlp 96 -> 96;" in plan.stderr
    report = json.loads(plan.stdout)
    assert (report["source"]["kv_heads"], report["target"]["kv_heads"]) == (2, 1)
    done = lg("shrink", folder, "--kv-heads", "1", "-o", tmp_path / "out")
    assert done.code == 0, done.stderr
    assert "shrink (select): depth 3 -> 3, width 48 -> 48, heads 6 -> 6, kv heads 2 -> 1, mlp 96 -> 96;" \
        in done.stderr
    # Grouped-query attention kept as it is is still shown; a ViT has none to show.
    depth = lg("shrink", folder, "--depth", "2", "--dry-run")
    assert "heads 6 -> 6, kv heads 2 -> 2, mlp" in depth.stderr
    plain = lg("shrink", make_vit_path(tmp_path), "--depth", "1", "--dry-run")
    assert plain.code == 0 and "heads 2 -> 2, mlp" in plain.stderr and "kv heads" not in plain.stderr


def make_vit_path(folder):
    path = folder / "plain.safetensors"
    lgcli.save_model(make_vit(), path)
    return path


# ---------------------------------------------------------------- 4. a bench refused leaves nothing behind

def test_a_bench_on_less_than_one_batch_is_refused_before_it_makes_a_folder(vit, lg, tmp_path):
    out = tmp_path / "so_b" / "inner"
    result = lg("bench", vit, "--data", "fashion-mnist-mini", "--subset", "40", "--sizes", "1x64", "--methods",
                "select", "--steps", "2", "-o", out)
    assert result.stderr.strip().splitlines()[-1] == ("lg: error: the train split has 40 images, fewer than one "
                                                      "batch of 64 (lower --batch-size or raise --subset)")
    assert result.code == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []
    planned = lg("bench", vit, "--data", "fashion-mnist-mini", "--subset", "40", "--sizes", "1x64", "--methods",
                 "select", "--steps", "2", "--dry-run")
    assert planned.stderr.strip().splitlines()[-1] == result.stderr.strip().splitlines()[-1]


def small_bench(**overrides) -> BenchSettings:
    return BenchSettings(sizes=parse_sizes("1x64"), methods=["select"], subset="64", test_subset="16",
                         probe=ProbeSettings(steps=1, batch_size=16, progress=False), **overrides)


def failing_cell(cell, context):
    raise LgError("a cell failed")


def test_a_bench_that_fails_removes_the_folders_it_made_and_left_empty(vit, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_module, "_run_cell", failing_cell)
    out = tmp_path / "new" / "results"
    with pytest.raises(LgError, match="a cell failed"):
        bench(vit, "fashion-mnist-mini", out, small_bench(), notify=lambda message: None)
    assert list(tmp_path.iterdir()) == []


def test_a_bench_that_fails_keeps_the_users_folder_and_files(vit, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_module, "_run_cell", failing_cell)
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LgError, match="a cell failed"):
        bench(vit, "fashion-mnist-mini", out, small_bench(force=True), notify=lambda message: None)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    with pytest.raises(LgError, match="a cell failed"):
        bench(vit, "fashion-mnist-mini", tmp_path / "empty", small_bench(), notify=lambda message: None)
    assert (tmp_path / "empty").is_dir() and list((tmp_path / "empty").iterdir()) == []


# ---------------------------------------------------------------- 5. --method's help names who takes it

def test_grow_method_help_names_the_learngenes_that_take_it(lg):
    shown = lg("grow", "--help")
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", shown.stdout.decode()).split())
    assert ("For a learngene, only one of trained widths (TLEG, SWS and LeTs, of one width or several; WAVE "
            "condensed with --widths; none of a Swin), and only to reach a width it was not trained at") in text
    assert "Other learngenes build every size by their own rule and refuse it." in text


def test_counts_are_said_with_their_nouns_plural_as_english_makes_them():
    assert [counted(1, "class"), counted(2, "class"), counted(0, "pass"), counted(1, "channel"),
            counted(3, "channel"), counted(2, "batch")] == ["1 class", "2 classes", "0 passes", "1 channel",
                                                            "3 channels", "2 batches"]
