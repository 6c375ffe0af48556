"""Reading a model: a checkpoint into lg's canonical view (`Loaded`: spec
and stack), or into its family's live model; a live model back into a spec
and stack; and what a model of a spec does (its task)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import BinaryIO, Mapping

from .arch import detect_family, family_of_config, get_adapter, known_model_types
from .checkpoint import Checkpoint, check_memory, read_checkpoint
from .errors import LgError, UsageError, shown
from .lazy import nn, torch
from .preprocessing import MODEL_ATTRIBUTE, PREPROCESSING, attach, resolve, with_preprocessing
from .sizing import check_heads_known
from .stack import ArchSpec, Stack

MODEL, LEARNGENE = "model", "learngene"


@dataclass
class Loaded:
    """A checkpoint read into lg's canonical view."""

    spec: ArchSpec
    stack: Stack
    checkpoint: Checkpoint

    @property
    def dtype(self) -> torch.dtype:
        return dominant_dtype(self.checkpoint.tensors)


def load(source: str | os.PathLike | Checkpoint, heads: int | None = None,
         *, kv_heads: int | None = None, stdin: BinaryIO | None = None) -> Loaded:
    """Read a model checkpoint (file, '-', sharded folder, .pth) into (spec, stack).

    `heads` (or `kv_heads`, for grouped-query attention) gives the heads
    when the file does not record them; else they are read from the weights
    where they show them, else assumed (`spec.heads_assumed`).

    The stack is lazy: each role is read from the file when it is asked for
    (`loaded.stack.layers["fc1"]`), and not kept, so a checkpoint of any size
    loads in the memory of its largest role. `loaded.stack.materialized()`
    holds every role in memory."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
    lg = checkpoint.lg
    if lg.get("kind", MODEL) == LEARNGENE:
        raise LgError(f"{checkpoint.label}: is a learngene, not a model: build a model from it with lg grow "
                      f"(`lg inspect {shlex.quote(checkpoint.label)}` prints the line)")
    if lg.get("kind", MODEL) != MODEL:
        raise LgError(f"{checkpoint.label}: is a {lg.get('kind')}, not a model checkpoint")
    # A model folder's config.json is its configuration (lg's own metadata
    # records the same when lg wrote the folder); a single file's is lg.config.
    config = checkpoint.config if checkpoint.config is not None else lg.get("config")
    family = lg.get("family") or (family_of_config(checkpoint.config) if checkpoint.config is not None else None)
    if checkpoint.config is not None and family is None:
        raise LgError(f"{checkpoint.label}: config.json's model_type {shown(checkpoint.config.get('model_type'))} "
                      f"is not one lg reads ({', '.join(known_model_types())})")
    adapter = get_adapter(family or detect_family(checkpoint.tensors))
    try:
        spec, stack = adapter.to_stack(checkpoint.tensors, config=config, heads=heads, kv_heads=kv_heads,
                                       reader=checkpoint.read_into)
        # How an image model's images are prepared (`lgcli.preprocessing`): carried by the spec into every output.
        spec = with_preprocessing(spec, resolve(checkpoint, spec, adapter))
    except LgError as exc:  # name the file or folder the problem is in (a usage mistake stays one: exit 2)
        where = checkpoint.label
        kind = UsageError if isinstance(exc, UsageError) else LgError
        raise (exc if str(exc).startswith(where) else kind(f"{where}: {exc}")) from None
    # A role stack is a copy of its layers' tensors: one larger than the memory
    # available (a sparse file, say) is refused with the figures, not half-made.
    check_memory(stack.largest_role_elements() * 4, f"{checkpoint.label}: its largest role stack (float32)")
    return Loaded(spec=spec, stack=stack, checkpoint=checkpoint)


def task_of(spec: ArchSpec) -> str:
    """What a model of `spec` does (`lgcli.arch.base.TASKS`), as its family says."""
    return get_adapter(spec.family).task(spec)


def load_model(source: str | os.PathLike | Checkpoint, heads: int | None = None,
               *, kv_heads: int | None = None, stdin: BinaryIO | None = None) -> tuple[nn.Module, ArchSpec]:
    """The family's model built from a checkpoint and loaded strictly (float32).

    `heads` (or `kv_heads`) gives the attention heads of a file that does not
    record them and whose weights do not show them; such a file is refused
    without them: every split of the width into heads loads strictly, and a
    model of the wrong heads computes another function without a word."""
    loaded = load(source, heads=heads, kv_heads=kv_heads, stdin=stdin)
    # lg eval reaches this first too, so the remedy names its flag beside the keywords.
    check_heads_known(loaded.spec, because="the model's outputs depend on them", where=loaded.checkpoint.label,
                      remedy="pass heads=N (or kv_heads=N) to lgcli.load_model, or --heads N to lg eval")
    return build_model(loaded.spec, loaded.stack), loaded.spec


def build_model(spec: ArchSpec, stack: Stack) -> nn.Module:
    """The family's model of `spec` holding `stack`'s weights (float32),
    told how its images are prepared (the spec's recipe). Every model lg
    builds from weights comes from here: one built otherwise is fed lg's
    default recipe by whoever trains or scores it, and a real DINOv2 (ImageNet
    mean and std) then sees the wrong images without a word."""
    # For whoever feeds it (`lgcli.recipe.preprocessing_of(model)`).
    return attach(get_adapter(spec.family).load_model(spec, stack).float(), spec.extras.get(PREPROCESSING))


def spec_of_model(model: nn.Module, family: str | None = None) -> tuple[ArchSpec, Stack]:
    """(spec, stack) of a live model of a family lg knows."""
    from .arch import adapter_of_model

    adapter = get_adapter(family) if family is not None else adapter_of_model(model)
    config = adapter.spec_of_model(model)
    spec, stack = adapter.to_stack(adapter.saved_state(model), config=config)
    # A model lgcli.load_model built says how its images are prepared.
    return with_preprocessing(spec, getattr(model, MODEL_ATTRIBUTE, None)), stack


def create_model(spec: ArchSpec, seed: int | None = None) -> nn.Module:
    """The family's own random initialisation of the architecture `spec`
    describes, told how its images are prepared (the spec's recipe)."""
    return attach(get_adapter(spec.family).create_model(spec, seed=seed), spec.extras.get(PREPROCESSING))


def dominant_dtype(tensors: Mapping[str, torch.Tensor]) -> torch.dtype | None:
    counts: dict[torch.dtype, int] = {}
    for t in tensors.values():
        if t.is_floating_point():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.get) if counts else None
