"""A language model's training step that would outgrow the memory is said
before it runs (lgcli/step_memory.py), with the batch size that fits: the
formula checked by hand, said once, and wired into the one training loop."""

from __future__ import annotations

import pytest
import torch
import transformers

from lgcli import step_memory
from lgcli.step_memory import STATE_COPIES, STEP_LOGIT_COPIES, STEP_TEACHER_COPIES, step_memory_warning
from lgcli.text import TokenWindows
from lgcli.train import TrainConfig, train

CPU = torch.device("cpu")
POSITIONS, VOCABULARY = 12, 100


def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCABULARY, hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=44)
    return transformers.LlamaForCausalLM(config)


@pytest.fixture
def windows():
    inputs = torch.randint(VOCABULARY, (16, POSITIONS), generator=torch.Generator().manual_seed(0))
    return TokenWindows(inputs, inputs.clone())


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(step_memory, "_said", set())


def test_the_batch_that_fits_is_the_free_memory_over_a_windows_logits(monkeypatch, windows):
    model = tiny_llama()
    state = STATE_COPIES * 4 * sum(p.numel() for p in model.parameters())
    per_window = POSITIONS * VOCABULARY * 4 * STEP_LOGIT_COPIES
    monkeypatch.setattr(step_memory, "available_memory", lambda: state + 5 * per_window + 1)
    assert step_memory_warning(model, windows, 5, None, CPU) is None  # 5 windows fit
    line = step_memory_warning(model, windows, 8, None, CPU)
    assert line.startswith("lg: a step of 8 windows of 12 tokens over a 100-token vocabulary needs about ")
    assert line.endswith("it may run out of memory (--batch-size 5 would fit)")
    assert step_memory_warning(model, windows, 8, None, CPU) is None  # said once
    assert step_memory_warning(model, windows, 7, None, CPU, flag="--condense-batch-size").endswith(
        "(--condense-batch-size 5 would fit)")  # the option that set the batch (lg bench's condense runs)
    # A teacher's logits and the KL's terms: more copies per window, fewer windows fit.
    with_teacher = POSITIONS * VOCABULARY * 4 * (STEP_LOGIT_COPIES + STEP_TEACHER_COPIES)
    assert f"--batch-size {(5 * per_window + 1) // with_teacher} would fit" in \
        step_memory_warning(model, windows, 8, tiny_llama(), CPU)
    # Nothing to say without token windows, on a GPU (CUDA says so itself),
    # or when the memory cannot be read.
    assert step_memory_warning(model, object(), 8, None, CPU) is None
    assert step_memory_warning(model, windows, 9, None, torch.device("cuda")) is None
    monkeypatch.setattr(step_memory, "available_memory", lambda: None)
    assert step_memory_warning(model, windows, 64, None, CPU) is None


def test_only_the_parameters_the_optimiser_trains_hold_its_state(monkeypatch, windows):
    """A fit that trains some tensors only (WAVE's scalers, a head) keeps
    AdamW's moments and gradients for those alone: the memory left for the
    logits is larger, and more windows fit."""
    model = tiny_llama()
    per_window = POSITIONS * VOCABULARY * 4 * STEP_LOGIT_COPIES
    everything = STATE_COPIES * 4 * sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(step_memory, "available_memory", lambda: everything + 2 * per_window)
    assert "(--batch-size 2 would fit)" in step_memory_warning(model, windows, 64, None, CPU)
    head = model.get_output_embeddings().weight.numel()
    assert f"(--batch-size {(everything + 2 * per_window - STATE_COPIES * 4 * head) // per_window} would fit)" in \
        step_memory_warning(model, windows, 63, None, CPU, trained=head)


def test_the_training_loop_says_it_before_the_first_step(monkeypatch, windows, capsys):
    monkeypatch.setattr(step_memory, "available_memory", lambda: 1)
    train(tiny_llama(), windows, TrainConfig(steps=1, batch_size=4, progress=False))
    said = capsys.readouterr().err.splitlines()
    assert sum("it may run out of memory (no batch fits: use a machine with more memory)" in line
               for line in said) == 1


def test_a_dry_run_times_a_batch_that_fits_and_scales_it(monkeypatch, windows, capsys):
    """A dry run times a few real steps: one the memory cannot hold was
    killed by the kernel after minutes. It times the largest batch that
    fits instead (said once), scales the time to the batch asked, and with
    no batch that fits stops in one line."""
    from lgcli import train as training
    from lgcli.errors import LgError
    from lgcli.train import seconds_per_step

    model = tiny_llama()
    state = STATE_COPIES * 4 * sum(p.numel() for p in model.parameters())
    per_window = POSITIONS * VOCABULARY * 4 * STEP_LOGIT_COPIES
    monkeypatch.setattr(step_memory, "available_memory", lambda: state + 2 * per_window)
    batches: list[int] = []
    real_train = training.train
    monkeypatch.setattr(training, "train", lambda model, data, config, **kw: (batches.append(config.batch_size),
                                                                                real_train(model, data, config, **kw)))
    ticks = iter(range(100))
    monkeypatch.setattr(training, "step_timer", lambda: float(next(ticks)))  # a step: 1 s
    per_step, timed = seconds_per_step(model, windows, TrainConfig(steps=5, batch_size=8, progress=False), steps=3)
    assert batches == [2] and (per_step, timed) == (4.0, 3)  # 1 s a step of 2, so 4 s a step of 8
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].endswith("(--batch-size 2 would fit); timed at a batch of 2, scaled to 8")
    monkeypatch.setattr(step_memory, "available_memory", lambda: 1)
    with pytest.raises(LgError, match="no batch fits"):
        seconds_per_step(model, windows, TrainConfig(steps=5, batch_size=8, progress=False))
