"""The hints `lg shrink` and `lg grow` print for what one command cannot
make: each runs as printed (read as a shell reads it, by tests/printed.py,
from the user's directory), carries every flag the user gave that its
commands take, writes the user's output (or, for a dry run, plans it), and a
shrink given --calibrate and no --method says so before it measures anything."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

import lgcli
from conftest import make_vit
from printed import run_printed
from text_models import make_model, save_folder

from lgcli.api import get_adapter, load
from lgcli.hints import Asked, mixed_change_hint, mixed_change_pipe
from lgcli.sizing import target_spec

CALIBRATE = ("--calibrate", "fashion-mnist-mini", "--calibrate-samples", "4")
OUT = "hinted out.safetensors"  # a space: the printed command quotes it


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> Path:
    """2 blocks of width 32, 2 heads of 16, for fashion-mnist-mini; its file records its heads."""
    model = make_vit(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
    path = tmp_path_factory.mktemp("vit") / "v.safetensors"
    lgcli.save_model(model, path)
    return path


@pytest.fixture(scope="module")
def nine_heads(tmp_path_factory) -> Path:
    """A Llama of width 36: 9 heads of 4 on 3 key/value heads (SmolLM2-135M's heads, small)."""
    folder = tmp_path_factory.mktemp("llama") / "nine"
    return save_folder(make_model("llama-gqa", hidden_size=36, num_attention_heads=9, num_key_value_heads=3),
                       folder, "llama-gqa")


@pytest.fixture
def here(vit, tmp_path, monkeypatch) -> Path:
    """The user's directory, holding the source: the in-process lg and the hint's shell both run there."""
    (tmp_path / "v.safetensors").write_bytes(vit.read_bytes())
    monkeypatch.chdir(tmp_path)
    return tmp_path


class PassesStarted(list):
    """The calibration passes started while they are refused; `allow()` lets
    the ones the printed hint runs go ahead."""

    allowed = False

    def allow(self) -> None:
        self.allowed = True


@pytest.fixture
def no_pass(monkeypatch) -> PassesStarted:
    """Each calibration pass started before the hint runs (none should be): it is refused."""
    import lgcli.calibration

    real, started = lgcli.calibration.calibrate, PassesStarted()

    def refuse(*args, **kwargs):
        if started.allowed:
            return real(*args, **kwargs)
        started.append(args)
        raise RuntimeError("a calibration pass ran")

    monkeypatch.setattr(lgcli.calibration, "calibrate", refuse)
    return started


def the_hint(stderr: str) -> str:
    """The command(s) a one-line refusal prints."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    line = lines[0]
    assert "<in memory>" not in line and "CheckedOutput" not in line and "..." not in line, line
    for route in ("pipe the two: ", "run: "):
        if route in line:
            return line.split(route, 1)[1]
    raise AssertionError(f"no command in: {line}")


def commands(hint: str) -> list[list[str]]:
    return [shlex.split(part) for part in hint.split(" | ")]


def sizes_of(path: Path) -> tuple:
    spec = load(path).spec
    return spec.depth, spec.width, spec.heads, spec.key_value_heads


@pytest.mark.parametrize("args, made", [
    (("--depth", "1", "--width", "48"), (1, 48, 3, 3)),  # shallower and wider: it ran block ablation, then refused
    (("--depth", "3", "--width", "16"), (3, 16, 1, 1)),  # deeper and narrower: it forgot the width, wrote to -o -
    (("--heads", "1"), (2, 32, 1, 1)),                   # a larger head dim: the pipe lost --calibrate
])
def test_the_calibrated_default_refuses_before_any_pass_with_a_pipe_that_runs(here, no_pass, lg, args, made):
    done = lg("shrink", "v.safetensors", *args, *CALIBRATE, "-o", OUT)
    assert done.code == 1 and no_pass == [], done.stderr
    hint = the_hint(done.stderr)
    first, *rest = commands(hint)
    # lg's data-aware default, named as the user asked for it: no --method, the calibration flags carried.
    assert first[:3] == ["lg", "shrink", "v.safetensors"] and "--method" not in first, hint
    assert " ".join(CALIBRATE) in " ".join(first), hint
    assert commands(hint)[-1][-2:] == ["-o", OUT] and not (here / OUT).exists(), hint
    assert [c[1] for c in rest] == ["grow"] and "--calibrate" not in rest[0], hint  # lg grow takes no data
    no_pass.allow()  # the hint measures, as it should
    ran = run_printed(hint, here)
    assert ran.code == 0, (hint, ran.stderr)
    assert sizes_of(here / OUT) == made


def test_a_two_step_calibrated_shrink_says_what_its_second_step_refuses_before_the_first_measures(tmp_path, no_pass,
                                                                                                  lg):
    """The file does not record its heads, which a width change needs: block
    ablation to depth 1 ran its passes, then the width step refused."""
    from conftest import write_plain

    source = write_plain(make_vit(depth=2, embed_dim=64, num_heads=2, patch_size=7, img_size=28, in_chans=1,
                                  num_classes=10), tmp_path / "plain.safetensors")
    done = lg("shrink", source, "--depth", "1", "--width", "32", "--heads", "1", *CALIBRATE,
              "-o", tmp_path / "o.safetensors")
    assert done.code != 0 and no_pass == [], done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--source-heads" in done.stderr, done.stderr
    assert not (tmp_path / "o.safetensors").exists()


@pytest.mark.parametrize("args, output", [
    (("--depth", "1", "--width", "48", *CALIBRATE), None),  # it printed --method activation, no --calibrate, and
    (("--depth", "1", "--width", "48", *CALIBRATE), OUT),   # -o 'CheckedOutput(path=...)'
    (("--depth", "3"), None),                               # it printed `lg grow ... -o -`, refused on a terminal
    (("--depth", "3"), OUT),
])
def test_a_dry_runs_hint_is_a_dry_run_that_runs(here, no_pass, lg, args, output):
    named = ("-o", output) if output else ()
    done = lg("shrink", "v.safetensors", *args, *named, "--dry-run")
    assert done.code == 1 and no_pass == [], done.stderr
    hint = the_hint(done.stderr)
    last = commands(hint)[-1]
    assert "--dry-run" in last and "--dry-run" not in " ".join(" ".join(c) for c in commands(hint)[:-1]), hint
    assert (last[last.index("-o") + 1] == output) if output else ("-o" not in last), hint
    if "--calibrate" in args:
        assert "--method" not in hint and " ".join(CALIBRATE) in hint, hint
    before = sorted(os.listdir(here))
    no_pass.allow()  # the hint measures, as it should
    ran = run_printed(hint, here)
    assert ran.code == 0, (hint, ran.stderr)
    assert "dry run, nothing written" in ran.stderr and sorted(os.listdir(here)) == before


@pytest.mark.parametrize("args, on_shrink, on_both", [
    (("--method", "angular", *CALIBRATE), ["--method angular", " ".join(CALIBRATE)], []),
    (("--method", "bot", "--wavelet", "db2", "--seed", "3"), ["--method bot", "--wavelet db2"], ["--seed 3"]),
])
def test_a_pipe_carries_the_options_of_each_commands_method(here, lg, args, on_shrink, on_both):
    """The pipe's shrink runs the user's method: its options go with it (a
    bot without --wavelet db2 ran, silently, another wavelet; angular
    without --calibrate was refused); the grow runs its own default."""
    done = lg("shrink", "v.safetensors", "--depth", "1", "--width", "48", *args, "-o", OUT)
    assert done.code == 1, done.stderr
    hint = the_hint(done.stderr)
    shrink, grow = (" ".join(c) for c in commands(hint))
    assert all(flag in shrink for flag in on_shrink + on_both), hint
    assert all(flag in grow for flag in on_both) and not any(flag in grow for flag in on_shrink), hint
    ran = run_printed(hint, here)
    assert ran.code == 0, (hint, ran.stderr)
    assert sizes_of(here / OUT) == (1, 48, 3, 3)


def test_the_pipe_finder_tries_a_middle_narrower_than_both(nine_heads, tmp_path, monkeypatch, lg):
    """9 heads of 4 on 3 key/value heads, to 10 heads on 2 (width 36 -> 40):
    no middle 36 wide keeps the head dim with 2 key/value heads, and it said
    neither command reaches it; through 32 wide, 8 heads on 2, both do."""
    monkeypatch.chdir(tmp_path)
    done = lg("shrink", nine_heads, "--width", "40", "--kv-heads", "2", "-o", "hinted out")
    assert done.code == 1, done.stderr
    hint = the_hint(done.stderr)
    assert "--width 32 --heads 8" in hint and "--kv-heads 2" in hint, hint
    ran = run_printed(hint, tmp_path)
    assert ran.code == 0, (hint, ran.stderr)
    assert sizes_of(tmp_path / "hinted out") == (3, 40, 10, 2)


def test_it_still_says_neither_where_nothing_reaches(tmp_path):
    """A head dim set apart from the width (config.json head_dim) is kept by
    every resize: no command, nor pipe, makes another."""
    folder = save_folder(make_model("llama-gqa", hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                                    head_dim=8), tmp_path / "apart", "llama-gqa")
    source = load(folder).spec
    unreachable = source.with_sizes(depth=4, width=24, heads=2, head_dim=16, mlp_dim=source.mlp_dim, kv_heads=2)
    assert mixed_change_hint(source, unreachable, src="s", output="o", asked=Asked("shrink"), source_options=(),
                             output_options=()) == \
        "neither lg shrink nor lg grow reaches these sizes, alone or piped together"
    reachable = target_spec(source, depth=4, width=24, heads=2)  # the same change at the head dim kept
    assert mixed_change_pipe(source, reachable, src="s", output="o") is not None


def test_the_pipe_finder_checks_sizes_against_the_users_max_params(nine_heads, monkeypatch, lg, tmp_path):
    """Each step of a pipe is checked as its command will check it, under the
    --max-params the user gave (which the hint passes on): raised over lg's
    default, the pipe is found where it said neither command reaches the
    sizes; lowered under a step's size, no pipe is printed that would fail."""
    import lgcli.sizing

    source = load(nine_heads).spec
    target = target_spec(source, width=40, kv_heads=2)  # 10 heads on 2: a shrink piped into a grow
    assert mixed_change_pipe(source, target, src="s", output="o", options=Asked("shrink")) is not None
    count = get_adapter(target.family).parameter_count(target)
    assert mixed_change_pipe(source, target, src="s", output="o", options=Asked("shrink", max_params=count - 1)) \
        is None
    monkeypatch.setattr(lgcli.sizing, "DEFAULT_MAX_PARAMS", count - 1)  # the target over the default
    assert mixed_change_pipe(source, target, src="s", output="o", options=Asked("shrink")) is None
    raised = Asked("shrink", max_params=2 * count)
    assert mixed_change_pipe(source, target, src="s", output="o", options=raised) is not None
    done = lg("shrink", str(nine_heads), "--width", "40", "--kv-heads", "2", "--max-params", str(2 * count),
              "-o", str(tmp_path / "out"))
    assert done.code == 1, done.stderr
    hint = the_hint(done.stderr)
    assert all(f"--max-params {2 * count:g}" in " ".join(command) for command in commands(hint)), hint


def test_max_params_admits_a_grouped_query_model_at_its_exact_count(nine_heads):
    """The early bound counts key/value projections at full width; a model
    whose key/value heads are fewer is counted exactly before a refusal, so
    --max-params equal to its count admits it and one less refuses it, naming
    both numbers whole (3 significant figures could not tell them apart)."""
    source = load(nine_heads).spec
    count = get_adapter(source.family).parameter_count(target_spec(source, depth=5))
    assert target_spec(source, depth=5, max_params=count).depth == 5
    with pytest.raises(lgcli.errors.LgError, match=re.escape(f"has {count:,} parameters, over the limit of "
                                                             f"{count - 1:,} ")):
        target_spec(source, depth=5, max_params=count - 1)
