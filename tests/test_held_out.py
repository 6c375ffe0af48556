"""HeldOutScores on text: the teacher's logits at the scored tokens kept
across scorings of the student when they fit in MAX_LOGIT_ELEMENTS, the
figures those of a pass that runs the teacher beside the student."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lgcli import held_out, text
from lgcli.held_out import HeldOutScores, agreement
from lgcli.losses import IGNORE
from lgcli.text import TextData, TokenWindows, evaluate_text

VOCABULARY, LENGTH, WINDOWS = 64, 10, 30


def llama(layers: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCABULARY, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def data() -> TextData:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, VOCABULARY, (WINDOWS, LENGTH), generator=generator)
    targets = torch.roll(inputs, -1, dims=1)
    targets[:, -1] = IGNORE
    targets[torch.rand(WINDOWS, LENGTH, generator=generator) < 0.3] = IGNORE  # scattered unscored tokens too
    test = TokenWindows(inputs, targets)
    return TextData(name="random", task="causal-lm", train=test, test=test, seq_len=LENGTH, tokenizer="none",
                    tokens=WINDOWS * LENGTH, test_split="test")


def counted(model: torch.nn.Module) -> list:
    """The windows each forward of `model` took."""
    seen: list = []
    model.register_forward_hook(lambda module, args, kwargs, output: seen.append(len(kwargs["input_ids"])),
                                with_kwargs=True)
    return seen


@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_the_teachers_kept_logits_give_the_figures_of_running_it_again(data, monkeypatch, tau):
    """In batches of 8 windows (several sums): with the teacher's logits
    kept, it runs once over two scorings of a student (and of a changed
    student); with too many to keep it runs at every scoring; the figures
    are the same to the bit, and those of evaluate_text and agreement."""
    monkeypatch.setattr(text, "MAX_LOGIT_ELEMENTS", 8 * LENGTH * VOCABULARY)  # scoring batches of 8 windows
    teacher, student, other = llama(2, 0), llama(1, 1), llama(1, 2)
    seen = counted(teacher)
    scored = int((data.test.targets != IGNORE).sum())
    monkeypatch.setattr(held_out, "MAX_LOGIT_ELEMENTS", scored * VOCABULARY)  # just fits
    kept = HeldOutScores(teacher, data, with_labels=True, tau=tau, device="cpu")
    got = (kept.student(student), kept.teacher(), kept.student(student), kept.student(other))
    assert sum(seen) == WINDOWS and len(seen) == 4  # one pass, in 4 batches
    assert kept._kept_text is not None and len(kept._kept_text[1]) == 4

    seen.clear()
    monkeypatch.setattr(held_out, "MAX_LOGIT_ELEMENTS", scored * VOCABULARY - 1)  # one token too many
    beside = HeldOutScores(teacher, data, with_labels=True, tau=tau, device="cpu")
    again = (beside.student(student), beside.teacher(), beside.student(student), beside.student(other))
    assert sum(seen) == 3 * WINDOWS and beside._kept_text == (8, None)
    assert got == again
    assert got[0] == got[2] != got[3]

    def rounded(figures):
        return {k: round(v, 4) for k, v in figures.items() if k != "tokens"}

    for model, figures in ((student, got[0]), (other, got[3])):
        assert figures == {**rounded(evaluate_text(model, data.test)),
                           **rounded(agreement(model, teacher, data, tau=tau))}
    assert got[1] == rounded(evaluate_text(teacher, data.test))


def test_kept_logits_serve_only_the_batches_they_were_made_in(data, monkeypatch):
    """A scoring in other batches (a student whose vocabulary sizes them
    otherwise) runs the teacher again rather than read logits whose last
    bits could differ."""
    teacher, student = llama(2, 0), llama(1, 1)
    seen = counted(teacher)
    scores = HeldOutScores(teacher, data, with_labels=True, tau=1.0, device="cpu")
    scores.student(student)
    monkeypatch.setattr(text, "MAX_LOGIT_ELEMENTS", 8 * LENGTH * VOCABULARY)
    in_eights = scores.student(student)
    assert sum(seen) == 2 * WINDOWS and seen[-1] == WINDOWS - 24  # run again, in batches of 8
    assert in_eights == HeldOutScores(teacher, data, with_labels=True, tau=1.0, device="cpu").student(student)
