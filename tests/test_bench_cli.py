"""`lg bench --condense-batch-size`: the batch its learngene kinds are
condensed at, from the command line (it was fixed at 64, and `--batch-size`
sets only the probe's)."""

from __future__ import annotations

import json

import pytest

import test_bench
from lgcli.options import DEFAULT_CONDENSE_BATCH_SIZE

ancestry = test_bench.ancestry  # the fixture: test_bench's two-block ViT ancestry

TINY_BENCH = ("--data", "fashion-mnist-mini", "--sizes", "1x32", "--methods", "tleg", "--steps", "1",
              "--condense-steps", "1", "--subset", "64", "--test-subset", "16")


@pytest.fixture
def asked(monkeypatch):
    """The settings `lg bench` hands to the bench (nothing is run)."""
    import lgcli.bench

    seen = []

    def fake_bench(ancestry, data, out, settings, **kwargs):
        seen.append(settings)
        raise lgcli.errors.LgError("stopped by the test")

    monkeypatch.setattr(lgcli.bench, "bench", fake_bench)
    return seen


@pytest.mark.parametrize("given, expected", [((), DEFAULT_CONDENSE_BATCH_SIZE), (("--condense-batch-size", "8"), 8),
                                             (("--condense-batch-size", "200"), 200)])
def test_the_flag_sets_the_condense_batch_and_its_default_is_the_one_before(lg, asked, ancestry, tmp_path,
                                                                           given, expected):
    result = lg("bench", ancestry, *TINY_BENCH, "--batch-size", "16", *given, "-o", tmp_path / "out")
    assert result.code == 1 and "stopped by the test" in result.stderr
    (settings,) = asked
    # The default is the one a bench without the flag always used, so the
    # reuse keys (which hold the batch) of earlier benches' learngenes are unchanged.
    assert settings.condense_batch_size == expected
    assert settings.probe.batch_size == 16  # --batch-size stays the probe's


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5"])
def test_a_bad_condense_batch_size_is_one_line(lg, ancestry, tmp_path, value):
    result = lg("bench", ancestry, *TINY_BENCH, "--condense-batch-size", value, "-o", tmp_path / "out")
    lines = result.stderr.strip().splitlines()
    assert result.code == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("lg: error: ") and "--condense-batch-size" in lines[0]
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_the_learngene_is_condensed_at_the_batch_asked(lg, ancestry, tmp_path):
    out = tmp_path / "out"
    result = lg("bench", ancestry, *TINY_BENCH, "--batch-size", "16", "--condense-batch-size", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["settings"]["condense_batch_size"] == 8 and report["settings"]["batch_size"] == 16
    # What the condense run itself recorded in the learngene it wrote.
    inspected = lg("inspect", out / "learngenes" / "tleg.lg.safetensors", "--json")
    assert inspected.code == 0, inspected.stderr
    step = json.loads(inspected.stdout)["provenance"][0]
    assert step["kind"] == "learngene" and step["method"] == "tleg" and step["options"]["batch_size"] == 8


def test_a_condense_batch_larger_than_the_data_names_the_benchs_flag(lg, ancestry, tmp_path):
    """The hint to lower the batch names the option that set it: in a
    bench, --condense-batch-size (--batch-size there is the probe's)."""
    result = lg("bench", ancestry, *TINY_BENCH, "--condense-batch-size", "1000", "-o", tmp_path / "out", "--json")
    said = result.stdout.decode() + result.stderr
    assert "fewer than one batch of 1000 (lower --condense-batch-size)" in said, said


def test_a_text_given_an_image_bench_is_said_to_be_one_as_lg_eval_says_it(lg, ancestry):
    """kjv-mini is lg's built-in text, not a missing folder: the bench says so
    in lg eval's words (it reads the data as lg eval does)."""
    expected = ("lg: error: --data kjv-mini is a text; image classifiers take an image folder or an image "
                "dataset (fashion-mnist-mini, fashion-mnist, mnist)")
    benched = lg("bench", ancestry, "--data", "kjv-mini", "--sizes", "3x64", "--dry-run")
    evaluated = lg("eval", ancestry, "--data", "kjv-mini")
    assert benched.code == evaluated.code == 1
    assert benched.stderr.strip().splitlines()[-1] == evaluated.stderr.strip().splitlines()[-1] == expected
    assert "Traceback" not in benched.stderr


def test_a_width_of_no_whole_heads_names_no_flag_the_bench_lacks(lg, ancestry):
    """The ancestry's heads are of dimension 16: width 100 is none of them, and
    lg bench has no --heads to pass."""
    result = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "3x100", "--dry-run")
    assert result.code == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == ("lg: error: width 100 is not a whole number of heads of "
                                                      "dimension 16 (valid widths: 64, 80, 96, 112, 128, 144, ...)")


def test_an_interrupted_bench_says_its_finished_cells_are_kept(tmp_path):
    """Each cell is saved as it lands, and the same command reuses it: an
    interrupt says so after "nothing written", so that no one deletes them."""
    from lgcli.commands.scoring import _bench_resume_hint

    out = tmp_path / "bench"
    assert _bench_resume_hint(str(out)) == ""  # nothing started: nothing to say
    (out / "cells").mkdir(parents=True)
    for name in ("select@3x64~seed0", "bot@3x64~seed0"):
        (out / "cells" / f"{name}.json").write_text("{}")
    assert _bench_resume_hint(str(out)) == (
        f"; but 2 finished cells are saved in {out}: the same command continues from them")
    (out / "learngenes").mkdir()
    (out / "learngenes" / "tleg-seed0.lg.safetensors").write_bytes(b"")
    assert _bench_resume_hint(str(out)) == (
        f"; but 1 learngene and 2 finished cells are saved in {out}: the same command continues from them")


def test_an_interrupt_after_a_bench_saved_a_learngene_says_what_is_kept_not_that_the_output_is_whole(tmp_path):
    """A bench's learngene is a part of its output, written in full long
    before the interrupt: the message is the bench's resume hint."""
    from lgcli import cli
    from lgcli.checkpoint import atomic
    from lgcli.commands.common import resume_hints, writes_parts
    from lgcli.commands.scoring import _bench_resume_hint

    out = tmp_path / "bench"
    (out / "learngenes").mkdir(parents=True)
    (out / "learngenes" / "tleg-seed0.lg.safetensors").write_bytes(b"")
    saved = list(atomic.committed_outputs), list(cli._signalled)
    try:
        atomic.committed_outputs[:] = [str(out / "learngenes" / "tleg-seed0.lg.safetensors")]
        cli._signalled[:] = [2]
        resume_hints[:], writes_parts[:] = [lambda: _bench_resume_hint(str(out))], [True]
        assert cli.interrupted_message() == (f"interrupted (SIGINT); nothing written; but 1 learngene is saved in "
                                             f"{out}: the same command continues from it")
        writes_parts.clear()  # any other command: its one output was committed before the signal
        assert cli.interrupted_message() == (f"interrupted (SIGINT) after "
                                             f"{out / 'learngenes' / 'tleg-seed0.lg.safetensors'} was written in full")
    finally:
        atomic.committed_outputs[:], cli._signalled[:] = saved
        resume_hints.clear()
        writes_parts.clear()


def test_seq_len_sets_a_language_models_windows_and_is_refused_for_images(lg):
    """lg bench takes --seq-len as lg eval, distill and condense do: a
    language model's windows (what its step's memory grows with)."""
    from pathlib import Path

    import lgcli
    from lgcli.bench import BenchSettings, _read_data

    examples = Path(__file__).resolve().parents[1] / "examples"
    llama = lgcli.load(examples / "kjv_llama")
    text = _read_data(llama, "kjv-mini", BenchSettings(sizes=[(1, 64)], seq_len=16), notify=lambda message: None)
    assert text.seq_len == 16 and text.train.batch([0])[0].shape[-1] == 16
    refused = lg("bench", examples / "fmnist_vit.safetensors", "--data", "fashion-mnist-mini", "--sizes", "3x64",
                 "--seq-len", "16", "-o", "unused", "--dry-run")
    assert refused.code == 2 and "--seq-len is for language models" in refused.stderr


def test_a_dry_run_counts_its_cells_with_the_seeds(lg):
    """`--seeds 3` triples the cells, and the count says so: select and the
    random baseline at one size, three seeds, not "6 cells (1 size x 2
    methods)"."""
    from pathlib import Path

    ancestry = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"
    planned = lg("bench", ancestry, "--data", "fashion-mnist-mini", "--sizes", "3x64", "--methods", "select",
                 "--seeds", "3", "--budget", "0", "--steps", "2", "--dry-run")
    assert planned.code == 0, planned.stderr
    assert "bench: 6 cells (1 size x 2 methods x 3 seeds), 6 to run" in planned.stderr, planned.stderr
