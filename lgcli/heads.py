"""What lg needs of a model's input and head, whichever library built it:
its logits, its classes, a new head, the images it takes and how they are
prepared. A library's convention for its head (timm's num_classes and
reset_classifier, a transformers config's num_labels) is its families'
adapters' to know (`lgcli.arch.base.FamilyAdapter`: num_classes,
classes_of, reset_head); a transformers output's logits are known here."""

from __future__ import annotations

from typing import Any

from lgcli.lazy import torch
from lgcli.preprocessing import MODEL_ATTRIBUTE, Preprocessing


def image_logits(output: Any) -> torch.Tensor:
    """An image classifier's logits: what a timm model returns, or the
    `logits` of a transformers model's output (`ImageClassifierOutput`)."""
    return output if isinstance(output, torch.Tensor) else output.logits


def classes_of(model: torch.nn.Module) -> int:
    """How many classes an image classifier has, as its family's library
    counts them (its adapter's `classes_of`)."""
    from .arch import adapter_of_model

    return adapter_of_model(model).classes_of(model)


def reset_head(model: torch.nn.Module, num_classes: int) -> None:
    """A new, randomly initialised head for `num_classes` classes, as its
    family's library makes one (its adapter's `reset_head`)."""
    from .arch import adapter_of_model

    adapter_of_model(model).reset_head(model, num_classes)


def model_input(model: torch.nn.Module) -> tuple[int, int]:
    """(channels, image size) a model is fed: a model built from a learngene
    says so in its `input_size` attribute; otherwise its family's adapter
    knows. A model that takes any size is fed at its preprocessing's
    (`Preprocessing.image_size`: a DINOv2 at its processor's 224 px)."""
    if getattr(model, "input_size", None) is not None:
        channels, height, _ = model.input_size
        channels, size = int(channels), int(height)
    else:
        from .arch import adapter_of_model

        channels, size = adapter_of_model(model).model_input(model)
    preprocessing = model_preprocessing(model)
    if preprocessing is not None and preprocessing.image_size is not None:
        return channels, preprocessing.image_size
    return channels, size


def model_preprocessing(model: torch.nn.Module) -> Preprocessing | None:
    """How a model wants its images, as whoever built it said
    (`lgcli.load_model`, lg eval, bench, condense: `preprocessing.MODEL_ATTRIBUTE`);
    None: lg's own."""
    return getattr(model, MODEL_ATTRIBUTE, None)


def class_names(model: torch.nn.Module) -> list[str] | None:
    """A classifier's class names by index, where its files state them
    (a transformers config's id2label, not its LABEL_0, LABEL_1, ...
    defaults); None where they do not (a timm file)."""
    return class_names_in(getattr(getattr(model, "config", None), "id2label", None))


def class_names_in(labels: Any) -> list[str] | None:
    """The class names an id2label mapping (a config's, ids as ints or as
    JSON's strings) states, by index; None for none or only defaults."""
    if not labels:
        return None
    names = [str(labels.get(index, labels.get(str(index), ""))) for index in range(len(labels))]
    return None if all(name in ("", f"LABEL_{index}") for index, name in enumerate(names)) else names
