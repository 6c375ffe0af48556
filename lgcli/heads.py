"""What lg needs of a model's input and head, whichever library built it:
its logits, its classes, a new head, the images it takes and how they are
prepared. The libraries' conventions (timm's num_classes and
reset_classifier, a transformers output's logits) are known here, and a
family's own through its adapter."""

from __future__ import annotations

from typing import Any

from lgcli.lazy import torch
from lgcli.preprocessing import MODEL_ATTRIBUTE, Preprocessing
from lgcli.stack import ArchSpec


def image_logits(output: Any) -> torch.Tensor:
    """An image classifier's logits: what a timm model returns, or the
    `logits` of a transformers model's output (`ImageClassifierOutput`)."""
    return output if isinstance(output, torch.Tensor) else output.logits


def classes_of(model: torch.nn.Module) -> int:
    """How many classes an image classifier has: timm's `num_classes`, or a
    transformers model's `config.num_labels`."""
    if hasattr(model, "num_classes"):
        return int(model.num_classes)
    return int(model.config.num_labels)


def reset_head(model: torch.nn.Module, num_classes: int) -> None:
    """A new, randomly initialised head for `num_classes` classes: timm's
    `reset_classifier`, or the family adapter's for a transformers model."""
    if hasattr(model, "reset_classifier"):
        model.reset_classifier(num_classes)
        return
    from .arch import adapter_of_model

    adapter_of_model(model).reset_head(model, num_classes)


def model_input(model: torch.nn.Module) -> tuple[int, int]:
    """(channels, image size) a model takes: a model built from a learngene
    says so in its `input_size` attribute; otherwise its family's adapter knows."""
    if getattr(model, "input_size", None) is not None:
        channels, height, _ = model.input_size
        return int(channels), int(height)
    from .arch import adapter_of_model

    return adapter_of_model(model).model_input(model)


def model_preprocessing(model: torch.nn.Module) -> Preprocessing | None:
    """How a model wants its images, as whoever built it said
    (`lgcli.load_model`, lg eval, bench, condense: `preprocessing.MODEL_ATTRIBUTE`);
    None: lg's own."""
    return getattr(model, MODEL_ATTRIBUTE, None)


def classes_of_spec(spec: ArchSpec) -> int | None:
    """How many classes the head of a model of `spec` has (None: it has no
    classifier head), as its family recorded them when it read the model.
    The one place shared code reads that entry of `spec.extras`, which is
    otherwise the family's own."""
    return spec.extras.get("num_classes")
