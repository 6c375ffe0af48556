"""The losses lg trains with: cross-entropy (with label smoothing) and
distillation from a teacher's logits (Hinton et al.), over images' labels
or tokens' (IGNORE marks a position that is not scored)."""

from __future__ import annotations

from typing import Callable

from lgcli.errors import LgError
from lgcli.lazy import F, torch


# `loss_fn(logits, labels, teacher_logits) -> scalar loss`; teacher_logits is
# None unless `train` was given a teacher. Logits are (..., classes) and
# labels the matching (...): one label per image, or one per token.
LossFn = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor | None"], "torch.Tensor"]


# The target of a position that is not scored (F.cross_entropy's default
# ignore_index): a token window's last position in a causal LM, every
# unmasked position in a masked LM.
IGNORE = -100


def cross_entropy_loss(label_smoothing: float = 0.0) -> LossFn:
    """Mean cross-entropy over every scored position: images' (B, K) logits
    and (B,) labels as they are, token windows' (B, T, V) and (B, T)
    flattened, so a batch's loss is the mean over its scored tokens (IGNORE
    targets left out)."""
    def loss(logits: torch.Tensor, labels: torch.Tensor, teacher_logits: torch.Tensor | None) -> torch.Tensor:
        return F.cross_entropy(logits.float().flatten(0, -2), labels.flatten(), ignore_index=IGNORE,
                               label_smoothing=label_smoothing)

    return loss


def distillation_loss(alpha: float, tau: float = 1.0, label_smoothing: float = 0.0) -> LossFn:
    """``(1 - alpha) * CE(z_s, y) + alpha * tau^2 * KL(softmax(z_t / tau) || softmax(z_s / tau))``
    (SPEC.md "TLEG": the reference run's loss; Hinton's tau^2 keeps the soft
    term's gradient scale independent of tau). alpha = 1 is pure soft
    distillation; without a teacher only the CE term can be computed, so the
    loss needs one whenever alpha > 0."""
    if not 0.0 <= alpha <= 1.0:
        raise LgError(f"--alpha must lie in [0, 1], not {alpha}")
    if not tau > 0:
        raise LgError(f"--tau must be positive, not {tau}")

    def loss(logits: torch.Tensor, labels: torch.Tensor, teacher_logits: torch.Tensor | None) -> torch.Tensor:
        # Positions flattened, as in cross_entropy_loss: an image is one
        # position, a token window one per token. Both terms are means over
        # the scored positions (labels not IGNORE): a causal LM's every next
        # token, a masked LM's masked ones (DistilBERT's choice), each image.
        logits = logits.float().flatten(0, -2)
        labels = labels.flatten()
        total = logits.new_zeros(())
        if alpha < 1.0:
            total = total + (1.0 - alpha) * F.cross_entropy(logits, labels, ignore_index=IGNORE,
                                                            label_smoothing=label_smoothing)
        if alpha > 0.0:
            if teacher_logits is None:
                raise ValueError("distillation_loss with alpha > 0 needs the teacher's logits")
            total = total + alpha * tau * tau * _soft_term(logits, teacher_logits.flatten(0, -2), labels != IGNORE)
        return total

    def _soft_term(logits: torch.Tensor, teacher_logits: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
        # KL(teacher || student) per position, its mean over the scored ones
        # (kl_div's "batchmean" of the scored rows). A (positions, vocabulary)
        # tensor is tens of megabytes a batch for an LLM, so: no division when
        # tau is 1 (dividing by 1 changes no bit), no autograd record of the
        # teacher's side (it has no gradient), and the mask picks entries of
        # the per-position vector rather than copying both logits' scored rows
        # -- unless most rows are unscored (a masked LM's 15%), where the copy
        # costs less than the softmaxes of the rows it leaves out.
        count = int(scored.sum())
        few = 2 * count < len(scored)
        if few:
            logits = logits[scored]
        with torch.no_grad():
            teacher = teacher_logits.float()
            teacher = teacher[scored] if few else teacher
            soft_teacher = F.log_softmax(teacher if tau == 1.0 else teacher / tau, dim=-1)
        soft_student = F.log_softmax(logits if tau == 1.0 else logits / tau, dim=-1)
        per_position = F.kl_div(soft_student, soft_teacher, reduction="none", log_target=True).sum(-1)
        return (per_position if few else per_position[scored]).sum() / count

    return loss
