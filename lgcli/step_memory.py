"""How much memory a language model's training step needs, said before the
first step when the machine does not have it.

A step over token windows holds the logits (batch x positions x vocabulary,
float32) many times over: the logits, their log-softmax, the loss's
intermediates and the gradients flowing back through them, and with a
teacher its logits and the KL's terms too. For a real vocabulary this
dwarfs the model: SmolLM2-135M (49,152 tokens) at lg's default batch of 64
windows of 128 tokens holds 1.6 GB per copy of its logits, and the kernel
kills the process, without a word, once the copies outgrow the memory. lg
says so first, on the CPU, with the batch size that would fit.
"""

from __future__ import annotations

import sys
from typing import Any

from .checkpoint.memory import available_memory, memory_text
from .devices import concrete_device
from .errors import LgError
from .lazy import torch

# Copies of a step's float32 logits held at its peak, measured with
# /usr/bin/time on SmolLM2-135M on the CPU (2 steps of 128-token windows,
# batch 4 against 16; 2026-11-27): `lg eval`'s probe (cross-entropy) peaked
# 3.31 GB higher at 12 more windows, 11.0 copies of their 302 MB of logits;
# `lg distill` (the teacher's logits and the KL besides) 4.56 GB, 15.1 copies.
STEP_LOGIT_COPIES = 11
STEP_TEACHER_COPIES = 4
# The optimiser's state and the gradients: AdamW's two moments and one gradient per trained parameter.
STATE_COPIES = 3

_said: set[tuple[Any, ...]] = set()


def _step_need(model: torch.nn.Module, data: Any, teacher: torch.nn.Module | None, device: torch.device,
               trained: int | None) -> tuple[int, int, int, int, int] | None:
    """(bytes per window, bytes of the optimiser's state, bytes free,
    positions, vocabulary) of a step over `data`'s token windows, or None
    where lg does not judge (module docstring: images, no output
    embeddings, a GPU, memory that cannot be read)."""
    inputs = getattr(data, "inputs", None)
    heads = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if device.type != "cpu" or not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 \
            or getattr(heads, "weight", None) is None:
        return None
    free = available_memory()
    if free is None:
        return None
    positions, vocabulary = int(inputs.shape[1]), int(heads.weight.shape[0])
    per_window = positions * vocabulary * 4 * (STEP_LOGIT_COPIES + (STEP_TEACHER_COPIES if teacher is not None else 0))
    if trained is None:
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return per_window, STATE_COPIES * 4 * trained, free, positions, vocabulary


def fitting_batch_size(model: torch.nn.Module, data: Any, batch_size: int, teacher: torch.nn.Module | None,
                       device: torch.device) -> int | None:
    """The largest batch (0: none) whose step fits in the CPU's free memory
    when a step of `batch_size` does not, else None (it fits, or lg does
    not judge): a dry run times that batch instead of the one the kernel
    would kill."""
    need = _step_need(model, data, teacher, device, None)
    if need is None:
        return None
    per_window, state, free, _, _ = need
    return None if state + batch_size * per_window <= free else max(0, (free - state) // per_window)


def step_memory_warning(model: torch.nn.Module, data: Any, batch_size: int, teacher: torch.nn.Module | None,
                        device: torch.device, trained: int | None = None, flag: str = "--batch-size") -> str | None:
    """One line when a step of `batch_size` token windows of `data` through
    `model` (a transformers language model) would need more memory than
    the CPU has free, else None (images, a model of no output embeddings,
    memory that cannot be read, or a case already said in this process).
    On a GPU a step too big fails with CUDA's own out-of-memory error, not
    the kernel's silent kill, and the copies were measured on the CPU: None.
    `trained`: the parameters the optimiser updates (a fit that trains some
    tensors only); default: every parameter that requires a gradient.
    `flag`: the option that set the batch (`lg bench --condense-batch-size`)."""
    step = _step_need(model, data, teacher, device, trained)
    if step is None:
        return None
    key = (batch_size, *step[3:], teacher is not None)
    if step[1] + batch_size * step[0] <= step[2] or key in _said:
        return None
    _said.add(key)
    return _too_big(step, batch_size, flag)


def _too_big(step: tuple[int, int, int, int, int], batch_size: int, flag: str) -> str:
    """The line that says a step of `batch_size` does not fit (`_step_need`'s figures)."""
    per_window, state, free, positions, vocabulary = step
    need = state + batch_size * per_window
    fits = (free - state) // per_window
    remedy = f"{flag} {fits} would fit" if fits >= 1 else "no batch fits: use a machine with more memory"
    return (f"lg: a step of {batch_size} windows of {positions} tokens over a {vocabulary:,}-token vocabulary needs "
            f"about {memory_text(need)} (logits, gradients and the optimiser's state) and the CPU has "
            f"{memory_text(free)} free: it may run out of memory ({remedy})")


def batch_to_time(model: torch.nn.Module, data: Any, batch_size: int, teacher: torch.nn.Module | None,
                  device: str, flag: str = "--batch-size") -> int:
    """The batch a dry run times on `device`: `batch_size`, or, where a step
    of it would not fit in the CPU's memory, the largest that does (said on
    stderr; the caller scales its time). None fits: an `LgError`."""
    cpu = torch.device("cpu")
    fits = fitting_batch_size(model, data, batch_size, teacher, cpu) if concrete_device(device) == "cpu" else None
    if fits is None:
        return batch_size
    if fits == 0:
        raise LgError(_too_big(_step_need(model, data, teacher, cpu, None), batch_size, flag).removeprefix("lg: "))
    said = step_memory_warning(model, data, batch_size, teacher, cpu, flag=flag)
    if said:
        print(f"{said}; timed at a batch of {fits}, scaled to {batch_size}", file=sys.stderr, flush=True)
    return fits
