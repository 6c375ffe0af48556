"""A text encoder without a language-model head (BertModel, GPT2Model,
LlamaModel) is one lg eval refuses: what lg prints after writing one, and the
model card it writes beside it, give the fine-tuning advice lg gives every
model it cannot score, never an `lg eval` line that would be refused; the
hints it does print run as printed. A language model, which lg scores, still
gets its `lg eval` line, and that line runs."""

from __future__ import annotations

import re
import shlex

import pytest

from printed import run_printed
from text_models import make_model, save_folder

ENCODERS = ["bert-model", "gpt2-model", "llama-model"]
# What lg says after writing a model it cannot score (commands/resizing.py).
FINE_TUNE = "this is an initialisation to fine-tune, not a finished model: fine-tune it with transformers' `Trainer`"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    made: dict[str, object] = {}

    def build(variant: str):
        if variant not in made:
            made[variant] = save_folder(make_model(variant), tmp_path_factory.mktemp(variant), variant)
        return made[variant]

    return build


def eval_lines(text: str) -> list[str]:
    """Every `lg eval PATH ...` command in `text` (a hint, or a card's shell block)."""
    return re.findall(r"lg eval \S+ --\S+.*", text)


def assert_told_to_fine_tune(done, out) -> None:
    assert done.code == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(FINE_TUNE), done.stderr
    assert not eval_lines(done.stderr), done.stderr
    card = (out / "README.md").read_text()
    assert "Fine-tune it with transformers' `Trainer`" in card and not eval_lines(card), card
    assert "```sh\nlg eval" not in card


@pytest.mark.parametrize("variant", ENCODERS)
def test_a_resized_encoder_is_told_to_fine_tune_not_to_run_lg_eval(folder, variant, tmp_path, lg):
    out = tmp_path / "small"
    assert_told_to_fine_tune(lg("shrink", folder(variant), "--depth", "2", "-o", out), out)
    # The line the tour was given is one lg eval refuses: no hint may name it.
    refused = lg("eval", out, "--data", "kjv-mini", "--steps", "0")
    assert refused.code == 1 and "text encoder without a language-model head" in refused.stderr


def test_a_calibrated_shrink_of_an_encoder_is_told_to_fine_tune(folder, tmp_path, lg):
    """The tour's command: block ablation, then activation, on kjv-mini."""
    out = tmp_path / "bs1"
    done = lg("shrink", folder("bert-model"), "--depth", "2", "--width", "16", "--calibrate", "kjv-mini",
              "--calibrate-samples", "8", "-o", out)
    assert_told_to_fine_tune(done, out)


def test_an_encoder_grown_from_a_peg_learngene_is_told_to_fine_tune(folder, tmp_path, lg):
    """The expand line `lg condense` prints runs as printed, and what it
    writes is told to be fine-tuned, not scored by lg."""
    gene = tmp_path / "peg.lg.safetensors"
    condensed = lg("condense", folder("bert-model"), "--method", "peg", "-o", gene)
    assert condensed.code == 0, condensed.stderr
    line = next(l for l in condensed.stderr.splitlines() if l.startswith("build a model with: "))
    grown = run_printed(line[len("build a model with: "):], cwd=tmp_path)
    out = tmp_path / re.search(r"-o (\S+)", line).group(1)
    assert_told_to_fine_tune(grown, out)


def test_a_peg_grow_of_an_encoder_does_not_advise_data_it_would_refuse(folder, tmp_path, lg):
    gene = tmp_path / "peg.lg.safetensors"
    assert lg("condense", folder("bert-model"), "--method", "peg", "-o", gene).code == 0
    grown = lg("grow", gene, "--depth", "4", "-o", tmp_path / "d4")
    assert grown.code == 0 and "peg: the map φ is a fresh seeded draw" in grown.stderr, grown.stderr
    assert "give --data" not in grown.stderr, grown.stderr
    # What the advice would have led to: refused, as lg trains no headless encoder.
    fitted = lg("grow", gene, "--depth", "4", "--data", "kjv-mini", "--steps", "1", "-o", tmp_path / "fit")
    assert fitted.code == 1 and "text encoder without a language-model head" in fitted.stderr


def test_a_language_model_keeps_its_lg_eval_hint_and_it_runs_as_printed(folder, tmp_path, lg):
    out = tmp_path / "lm"
    done = lg("shrink", folder("gpt2-lm"), "--depth", "2", "-o", out)
    assert done.code == 0, done.stderr
    [hint] = eval_lines(done.stderr)
    assert hint == f"lg eval {shlex.quote(str(out))} --data kjv-mini --steps 0", hint
    assert eval_lines((out / "README.md").read_text())
    scored = run_printed(hint)
    assert scored.code == 0 and "ppl" in scored.stdout.decode(), scored.stderr
