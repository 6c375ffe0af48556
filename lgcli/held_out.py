"""The held-out figures `lg distill` reports: the teacher's, and the
student's before and after training (top-1, top-5 and loss on images of its
classes, loss and perplexity on text; beside the teacher, the KL from it and
their top-1 agreement).

On images the teacher runs once: its pass gives its own figures and keeps
its logits (ten numbers an image for Fashion-MNIST), and each scoring of the
student is then one pass that gives both its label figures and its KL and
agreement against the kept logits. Three passes over the split instead of
seven (the teacher alone, then the student for its labels and again beside
the teacher, before and after): for a real DINOv2-S on a CPU and 10,000
test images the scoring was the longest part of a short run. The figures
are those of `evaluate_accuracy` and `agreement`, to the bit: the same
images, prepared the same way, in the same batches.

The teacher runs beside the student instead where keeping its logits does
not pay or cannot work: on text (a logit per vocabulary entry per token:
49,152 for SmolLM2), with the hidden-state term (whose teacher hidden states
are read during the student's pass), and for more logits than
MAX_LOGIT_ELEMENTS (images times classes). When the student wants its images
prepared otherwise than the teacher, the teacher's logits are kept for the
student's preparation after one more pass.

On text each scoring of the student is one pass of both models that gives
the student's loss and perplexity, its KL from the teacher and their
agreement, and the first also gives the teacher's own loss: two passes of
each model instead of four of the student and three of the teacher (the
teacher alone, then the student alone and beside the teacher, twice). The
figures are `evaluate_text`'s and `agreement`'s, to the bit. A real
SmolLM2 on a CPU spent longer scoring 718 windows than distilling. Where
the teacher's logits at the scored tokens fit in MAX_LOGIT_ELEMENTS (a small
vocabulary or split, a masked LM's few scored tokens) and there is no
hidden-state term, the first scoring keeps them and the teacher runs once.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Mapping

from .accuracy import evaluate_accuracy, label_totals
from .devices import autocast, distributed_setup, resolve_device
from .heads import model_input, model_preprocessing
from .hidden_states import HiddenStateTerm
from .images import ImageData
from .lazy import F, no_grad, nn, torch
from .losses import IGNORE
from .text import MAX_LOGIT_ELEMENTS, TextData, evaluate_text, loss_sum, perplexity_of, scoring_batch_size
from .pace import PassPace
from .train import ImageBatches

# Images (or windows, within MAX_LOGIT_ELEMENTS) a scoring pass takes at once:
# evaluate_accuracy's own batch, so the passes here give its figures exactly.
SCORE_BATCH_SIZE = 256


def held_out_batches(model: nn.Module, data: ImageData | TextData):
    """The held-out split as `model` is fed: images prepared by its own
    recipe (as training and `evaluate_accuracy` prepare them), or windows."""
    if isinstance(data, ImageData):
        channels, size = model_input(model)
        return ImageBatches(data.test, size, channels, preprocessing=model_preprocessing(model))
    return data.test


def _preparation(batches) -> tuple:
    """What decides the inputs a model sees: equal for two models, the same images."""
    return (batches.image_size, batches.channels, batches.preprocessing)


def vocabulary(model: nn.Module) -> int | None:
    """A language model's logits per position (None: not one)."""
    embeddings = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if embeddings is not None and getattr(embeddings, "weight", None) is not None:
        return int(embeddings.weight.shape[0])  # the logits' size, whatever the config says
    return getattr(getattr(model, "config", None), "vocab_size", None)


@no_grad
def agreement(student: nn.Module, teacher: nn.Module, data: ImageData | TextData, *, tau: float = 1.0,
              device: str = "cpu", hidden: HiddenStateTerm | None = None) -> dict[str, float]:
    """How far the student is from the teacher on the held-out split: the
    mean KL(softmax(z_t / tau) || softmax(z_s / tau)) per scored position
    (an image; a scored token) and the share of positions where their
    top-1 agree (%); with `hidden` (made on these two models), the mean over
    the student's blocks of the MSE between its hidden states and the
    teacher's at the term's blocks ("hidden_mse", without the weight)."""
    batches = held_out_batches(student, data)
    target = resolve_device(device, distributed_setup(device))
    was = student.training, teacher.training
    student.to(target).eval()
    teacher.to(target).eval()
    # Text: evaluate_text's batches (a bound on the logits held at once).
    size = SCORE_BATCH_SIZE if isinstance(data, ImageData) else scoring_batch_size(student, data.test,
                                                                                   SCORE_BATCH_SIZE)
    kl_sum, agree, count, hidden_sum = 0.0, 0, 0, 0.0
    with contextlib.ExitStack() as hooks:
        if hidden is not None:
            hooks.enter_context(hidden)
        for first in range(0, len(batches), size):
            inputs, targets = batches.batch(list(range(first, min(first + size, len(batches)))))
            inputs, targets = inputs.to(target), targets.to(target)
            with autocast(target):
                student_logits = batches.logits(student, inputs).float()
                teacher_logits = batches.logits(teacher, inputs).float()
            if hidden is not None:  # every example has as many positions: a batch weighs its examples
                hidden_sum += float(hidden.layer_mse().mean()) * len(inputs)
            scored = (targets != IGNORE).flatten()
            s = student_logits.flatten(0, -2)[scored]
            t = teacher_logits.flatten(0, -2)[scored]
            kl_sum += _kl_sum(s, t, tau)
            agree += int((s.argmax(-1) == t.argmax(-1)).sum())
            count += int(scored.sum())
    student.train(was[0])
    teacher.train(was[1])
    figures = {"kl": kl_sum / max(count, 1), "agreement": 100.0 * agree / max(count, 1)}
    if hidden is not None:
        figures["hidden_mse"] = hidden_sum / max(len(batches), 1)
    return figures


def _kl_sum(student: torch.Tensor, teacher: torch.Tensor, tau: float) -> float:
    return float(F.kl_div(F.log_softmax(student / tau, -1), F.log_softmax(teacher / tau, -1), reduction="sum",
                          log_target=True))


class HeldOutScores:
    """Scores on the held-out split of `data`, beside one teacher: the
    teacher's own (`teacher()`, first) and a student's (`student(model)`,
    as often as needed). `with_labels`: the data's labels fit the models
    (their classes; text always), so the label figures are given."""

    def __init__(self, teacher: nn.Module, data: ImageData | TextData, *, with_labels: bool, tau: float,
                 device: str, notify: Callable[[str], None] | None = None, fewer_flag: str | None = None):
        self.teacher_model, self.data, self.with_labels = teacher, data, with_labels
        self.tau, self.device = tau, device
        # A long pass is announced with its time through `notify`, and what `fewer_flag` would take.
        self.notify, self.fewer_flag = notify, fewer_flag
        # The teacher's held-out logits (images), by the preparation they were made under.
        self._kept: dict[tuple, Any] = {}
        # The teacher's logits at the scored held-out tokens (text), one tensor
        # a batch, and the batch size they were made in (None for too many
        # to keep: no pass tries again); None until a pass has run.
        self._kept_text: tuple[int, list] | None = None
        # The teacher's own figures, once a pass has given them.
        self._teacher: dict[str, float] | None = None

    def teacher(self) -> dict[str, float]:
        """The teacher's own figures (label figures only; none without
        labels): free when a student's scoring already ran the teacher
        (on text, always), else one pass."""
        if self._teacher is not None:
            return self._teacher
        if not isinstance(self.data, ImageData):
            self._teacher = score(self.teacher_model, None, self.data, with_labels=self.with_labels,
                                  tau=self.tau, device=self.device)
            return self._teacher
        self._kept_teacher_pass(held_out_batches(self.teacher_model, self.data))
        return self._teacher

    def student(self, model: nn.Module, hidden: HiddenStateTerm | None = None) -> dict[str, float]:
        """A student's figures: its label figures and its KL from the teacher
        and agreement (with `hidden`, the hidden states' MSE too)."""
        if not isinstance(self.data, ImageData):
            figures, teacher = self._text_pass(model, hidden, teacher_too=self._teacher is None)
            self._teacher = self._teacher or teacher
            return figures
        reference = None
        if hidden is None:
            batches = held_out_batches(model, self.data)
            if _preparation(batches) not in self._kept:
                # Before the teacher's own scoring, or a student fed otherwise: the teacher's logits on its inputs.
                self._kept_teacher_pass(batches)
            reference = self._kept[_preparation(batches)]
        if reference is None:  # the hidden-state term, or logits too many to keep
            return score(model, self.teacher_model, self.data, with_labels=self.with_labels, tau=self.tau,
                         device=self.device, hidden=hidden)
        return _rounded(self._image_pass(model, reference=reference, what="the student")[0])

    def planned(self, model: nn.Module) -> dict[str, Any]:
        """A dry run's scoring of `model` as the student: the passes over the
        held-out split `teacher` and `student` (before and after) make, and
        about how long they take, from one batch of each model timed on the
        device after one untimed (a first call's overhead is no pass's). On
        text both models run in both passes (an upper bound where the first
        keeps the teacher's logits); on images the teacher runs once, twice
        for a student prepared otherwise (the module docstring)."""
        target = resolve_device(self.device, distributed_setup(self.device))
        examples = len(self.data.test)
        if isinstance(self.data, ImageData):
            own, theirs = held_out_batches(model, self.data), held_out_batches(self.teacher_model, self.data)
            size, teacher_passes = SCORE_BATCH_SIZE, 1 + (_preparation(own) != _preparation(theirs))
        else:
            own = theirs = self.data.test
            size, teacher_passes = scoring_batch_size(model, self.data.test, SCORE_BATCH_SIZE), 2
        per_batch = (2 * _batch_seconds(model, own, min(size, examples), target)
                     + teacher_passes * _batch_seconds(self.teacher_model, theirs, min(size, examples), target))
        return {"examples": examples, "passes": {"student": 2, "teacher": teacher_passes}, "batch_size": size,
                "estimated_seconds": round(per_batch * -(-examples // size), 1)}

    def _kept_teacher_pass(self, batches: ImageBatches) -> None:
        """The teacher over the held-out images prepared as `batches` says,
        its logits kept; on its own preparation its figures are its own."""
        figures, logits = self._image_pass(self.teacher_model, reference=None, batches=batches, keep=True,
                                           what="the teacher")
        self._kept[_preparation(batches)] = logits
        if _preparation(batches) == _preparation(held_out_batches(self.teacher_model, self.data)):
            self._teacher = _rounded(figures) if self.with_labels else {}

    def _pace(self, what: str) -> PassPace:
        return PassPace(self.notify, f"scoring {what}", self.fewer_flag)

    @no_grad
    def _text_pass(self, model: nn.Module, hidden: HiddenStateTerm | None, *, teacher_too: bool):
        """One pass of the student and the teacher over the held-out windows:
        the student's loss and perplexity (evaluate_text's arithmetic, in its
        batches), its KL and agreement (agreement's), the hidden states' MSE
        with `hidden`; with `teacher_too`, the teacher's loss and perplexity.
        Under torchrun each process scores a share and the totals are summed.

        The KL needs the teacher's whole distribution at every scored token,
        so its logits there are what is kept (on the CPU, as _image_pass
        keeps them) when they fit in MAX_LOGIT_ELEMENTS: a later scoring
        reads them instead of running the teacher, the figures unchanged to
        the bit (the same logits, in the same batches). More (an LLM's
        vocabulary times thousands of tokens), or with the hidden-state term
        (whose hooks read the teacher's pass), the teacher runs again."""
        test, teacher = self.data.test, self.teacher_model
        distributed = distributed_setup(self.device)
        target = resolve_device(self.device, distributed)
        size = scoring_batch_size(model, test, SCORE_BATCH_SIZE)  # evaluate_text's batches
        # Kept logits serve only passes in the batches they were made in: a
        # model's logits may differ in the last bit from one batch size to another.
        known = self._kept_text is not None and self._kept_text[0] == size
        reuse = self._kept_text[1] if known and hidden is None and not teacher_too else None
        keep: list | None = [] if hidden is None and not known else None
        kept_rows = 0
        was = model.training, teacher.training
        model.to(target).eval()
        teacher.to(target).eval()
        # student loss, scored tokens, teacher loss, KL, agreeing tokens, hidden MSE x windows, windows
        totals = [0.0] * 7
        indices = list(range(distributed.rank, len(test), distributed.world_size))
        pace = self._pace("the student beside the teacher").begin(len(indices), size, "held-out windows")
        with contextlib.ExitStack() as hooks:
            if hidden is not None:
                hooks.enter_context(hidden)
            for first in range(0, len(indices), size):
                inputs, targets = test.batch(indices[first:first + size])
                inputs, targets = inputs.to(target), targets.to(target)
                with autocast(target):
                    student_logits = test.logits(model, inputs).float()
                    teacher_logits = None if reuse is not None else test.logits(teacher, inputs).float()
                if hidden is not None:  # every window has as many positions: a batch weighs its windows
                    totals[5] += float(hidden.layer_mse().mean()) * len(inputs)
                totals[0] += loss_sum(student_logits, targets)
                if teacher_too:
                    totals[2] += loss_sum(teacher_logits, targets)
                scored = targets.flatten() != IGNORE
                s = student_logits.flatten(0, -2)[scored]
                if reuse is not None:
                    t = reuse[first // size].to(target)
                else:
                    t = teacher_logits.flatten(0, -2)[scored]
                    kept_rows += len(t)
                    if keep is not None and kept_rows * t.shape[-1] <= MAX_LOGIT_ELEMENTS:
                        keep.append(t.cpu())
                    else:  # too many to keep: later scorings run the teacher again
                        keep = None
                totals[1] += int(scored.sum())
                totals[3] += _kl_sum(s, t, self.tau)
                totals[4] += int((s.argmax(-1) == t.argmax(-1)).sum())
                totals[6] += len(inputs)
                pace.batch_done()
        model.train(was[0])
        teacher.train(was[1])
        if hidden is None and not known:
            self._kept_text = (size, keep)
        student_sum, tokens, teacher_sum, kl_sum, agree, hidden_sum, windows = distributed.sum(
            torch.tensor(totals, dtype=torch.float64)).tolist()
        tokens = max(tokens, 1.0)
        figures = {"loss": student_sum / tokens, "perplexity": perplexity_of(student_sum / tokens),
                   "kl": kl_sum / tokens, "agreement": 100.0 * agree / tokens}
        if hidden is not None:
            figures["hidden_mse"] = hidden_sum / max(windows, 1.0)
        own = {"loss": teacher_sum / tokens, "perplexity": perplexity_of(teacher_sum / tokens)}
        return _rounded(figures), (_rounded(own) if teacher_too else None)

    @no_grad
    def _image_pass(self, model: nn.Module, *, reference: Any, batches: ImageBatches | None = None,
                    keep: bool = False, what: str = "the model"):
        """One pass of `model` over the held-out images (prepared as
        `batches` says; default: its own way): top-1, top-5 and loss against
        the labels (evaluate_accuracy's arithmetic), and with `reference`
        (a teacher's logits on the same inputs) the KL and agreement
        (agreement's); with `keep`, the pass's logits on the CPU (None when
        there are more than MAX_LOGIT_ELEMENTS)."""
        batches = batches or held_out_batches(model, self.data)
        target = resolve_device(self.device, distributed_setup(self.device))
        was = model.training
        model.to(target).eval()
        hits1 = hitsk = count = agree = 0
        loss_sum = kl_sum = 0.0
        kept: list | None = [] if keep else None
        pace = self._pace(what).begin(len(batches), SCORE_BATCH_SIZE, "held-out images")
        for first in range(0, len(batches), SCORE_BATCH_SIZE):
            inputs, labels = batches.batch(list(range(first, min(first + SCORE_BATCH_SIZE, len(batches)))))
            inputs, labels = inputs.to(target), labels.to(target)
            with autocast(target):
                logits = batches.logits(model, inputs).float()
            if kept is not None and (count + len(labels)) * logits.shape[-1] <= MAX_LOGIT_ELEMENTS:
                kept.append(logits.cpu())
            else:  # too many to keep (tens of thousands of classes): the teacher will run beside the student
                kept = None
            if self.with_labels:
                top_1, top_k, loss = label_totals(logits, labels)
                hits1, hitsk, loss_sum = hits1 + int(top_1.sum()), hitsk + top_k, loss_sum + loss
            if reference is not None:
                teacher_logits = reference[first:first + len(labels)].to(target)
                kl_sum += _kl_sum(logits, teacher_logits, self.tau)
                agree += int((logits.argmax(-1) == teacher_logits.argmax(-1)).sum())
            count += len(labels)
            pace.batch_done()
        model.train(was)
        total = max(count, 1)
        figures: dict[str, float] = {}
        if self.with_labels:
            figures.update(top1=100.0 * hits1 / total, top5=100.0 * hitsk / total, loss=loss_sum / total)
        if reference is not None:
            figures.update(kl=kl_sum / total, agreement=100.0 * agree / total)
        return figures, torch.cat(kept) if kept else None


def _batch_seconds(model: nn.Module, batches: Any, size: int, target: Any) -> float:
    """Seconds `model` takes over the first `size` examples of `batches` (a
    held-out split, as fed), the second of two calls; its mode kept."""
    was = model.training
    model.to(target).eval()
    inputs = batches.batch(list(range(size)))[0].to(target)
    with torch.inference_mode(), autocast(target):
        for _ in range(2):
            started = time.perf_counter()
            batches.logits(model, inputs)
    model.train(was)
    return time.perf_counter() - started


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    """As the report keeps them: four decimals; counts of images or tokens left out."""
    return {k: round(v, 4) for k, v in figures.items() if k not in ("images", "tokens")}


def score(model: nn.Module, teacher: nn.Module | None, data: ImageData | TextData, *, with_labels: bool,
          tau: float, device: str, hidden: HiddenStateTerm | None = None) -> dict[str, float]:
    """One model's figures on the held-out split, computed alone (no logits
    kept): its label figures and, beside a teacher, its KL from the teacher
    and their agreement (and with `hidden`, the hidden states' MSE)."""
    figures: dict[str, float] = {}
    if with_labels:
        scored = (evaluate_accuracy(model, data.test, device=device) if isinstance(data, ImageData)
                  else evaluate_text(model, data.test, device=device))
        figures.update(_rounded(scored))
    if teacher is not None:
        figures.update(_rounded(agreement(model, teacher, data, tau=tau, device=device, hidden=hidden)))
    return figures


def worsened(before: Mapping[str, float], after: Mapping[str, float]) -> str:
    """The held-out figures that say a run left the student worse on every
    count it was trained on ("KL 16.6 -> 37.8, loss ..."): the KL from the
    teacher rose, and so did the labels' loss where there is one (mixed in
    at --alpha below 1, a risen KL alone can be the price of a lower loss).
    Empty when it did not: a short run at full rate on a trained model can."""
    keys = [key for key in ("kl", "loss") if key in before and key in after]
    if "kl" not in keys or not all(after[key] > before[key] for key in keys):
        return ""
    return ", ".join(f"{key.upper() if key == 'kl' else key} {before[key]:.4g} -> {after[key]:.4g}" for key in keys)
