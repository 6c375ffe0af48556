"""distillation_loss against a straightforward reference written here: the
same value and gradient on a small hand-made case, whatever path it takes
(few or most positions scored, tau 1 or not, with or without the labels' term)."""

from __future__ import annotations

import math

import pytest
import torch

from lgcli.losses import IGNORE, distillation_loss


def reference(logits, labels, teacher, alpha, tau):
    """(1 - alpha) * mean CE over scored positions + alpha * tau^2 * mean
    KL(softmax(t / tau) || softmax(s / tau)) over them, entry by entry."""
    positions, vocabulary = logits.shape[0] * logits.shape[1], logits.shape[-1]
    s, t, y = logits.reshape(positions, vocabulary), teacher.reshape(positions, vocabulary), labels.reshape(-1)
    ce, kl, count = 0.0, 0.0, 0
    for i in range(positions):
        if int(y[i]) == IGNORE:
            continue
        count += 1
        ce = ce - torch.log_softmax(s[i], -1)[y[i]]
        p_t, log_p_s = torch.softmax(t[i] / tau, -1), torch.log_softmax(s[i] / tau, -1)
        for v in range(vocabulary):
            kl = kl + p_t[v] * (torch.log(p_t[v]) - log_p_s[v])
    return (1 - alpha) * ce / count + alpha * tau * tau * kl / count


def case(scored_rows):
    """2 windows of 3 positions over 5 classes; the positions not in `scored_rows` IGNORE."""
    logits = torch.tensor([[[2.0, -1.0, 0.5, 0.0, 1.5], [0.3, 0.2, -2.0, 1.0, 0.0], [1.0, 1.0, 1.0, -1.0, 3.0]],
                           [[-0.5, 2.5, 0.0, 0.7, -1.2], [0.0, 0.0, 0.1, 0.2, 0.3], [4.0, -3.0, 2.0, 1.0, 0.0]]],
                          dtype=torch.float64)
    teacher = torch.tensor([[[1.0, 0.0, 0.5, -1.0, 2.0], [0.0, 1.0, -1.0, 2.0, 0.5], [2.0, 0.0, 1.0, 0.0, 1.0]],
                            [[0.0, 3.0, -1.0, 0.0, -1.0], [1.0, -1.0, 0.0, 0.5, 0.0], [3.0, -2.0, 2.5, 0.0, 1.0]]],
                           dtype=torch.float64)
    labels = torch.tensor([[0, 3, 4], [1, 2, 0]])
    flat = labels.view(-1)
    for i in range(6):
        if i not in scored_rows:
            flat[i] = IGNORE
    return logits, labels, teacher


@pytest.mark.parametrize("scored_rows", [(0, 1, 3, 4), (2,), (0, 1, 2, 3, 4, 5)])  # most, few, all scored
@pytest.mark.parametrize("tau", [1.0, 2.0])
@pytest.mark.parametrize("alpha", [1.0, 0.4])  # pure soft distillation; beside the labels' term
def test_the_loss_and_its_gradient_are_the_references(scored_rows, tau, alpha):
    logits, labels, teacher = case(scored_rows)
    # The loss takes float32 logits; the reference runs in float64 on the same values.
    got_in = logits.float().requires_grad_()
    got = distillation_loss(alpha, tau)(got_in, labels, teacher.float())
    want_in = got_in.detach().double().requires_grad_()
    want = reference(want_in, labels, teacher.float().double(), alpha, tau)
    assert math.isclose(float(got.detach()), float(want.detach()), rel_tol=1e-5, abs_tol=1e-6)
    got.backward()
    want.backward()
    assert torch.allclose(got_in.grad.double(), want_in.grad, rtol=1e-5, atol=1e-7)
    unscored = (labels == IGNORE).unsqueeze(-1).expand_as(got_in.grad)
    assert torch.all(got_in.grad[unscored] == 0)  # a position not scored gets no gradient


def test_the_teacher_gets_no_gradient_and_nothing_scored_is_nan():
    logits, labels, teacher = case((0, 4))
    teacher = teacher.float().requires_grad_()
    distillation_loss(1.0, 2.0)(logits.float().requires_grad_(), labels, teacher).backward()
    assert teacher.grad is None
    nothing = torch.full_like(labels, IGNORE)
    assert math.isnan(float(distillation_loss(1.0)(logits.float(), nothing, teacher)))
