"""What the command line does, as functions for notebooks and scripts.

    >>> import lgcli
    >>> loaded = lgcli.load("deit_s.safetensors")          # spec + canonical stack
    >>> model, spec = lgcli.load_model("deit_s.safetensors")  # a timm nn.Module
    >>> lgcli.inspect_checkpoint("deit_s.safetensors")["load_call"]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

import torch
from torch import nn

from .arch import detect_family, get_adapter
from .checkpoint import (STDIO, Checkpoint, check_output, provenance_chain, provenance_metadata,
                         read_checkpoint, write_checkpoint)
from .errors import LgError
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
        return _dominant_dtype(self.checkpoint.tensors)


def load(source: str | os.PathLike | Checkpoint, heads: int | None = None,
         *, stdin: BinaryIO | None = None) -> Loaded:
    """Read a model checkpoint (file, '-', sharded folder, .pth) into (spec, stack)."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
    lg = checkpoint.lg
    if lg.get("kind", MODEL) != MODEL:
        raise LgError(f"{checkpoint.source}: is a {lg.get('kind')}, not a model checkpoint")
    family = lg.get("family") or detect_family(checkpoint.tensors)
    adapter = get_adapter(family)
    spec, stack = adapter.to_stack(checkpoint.tensors, config=lg.get("config"), heads=heads)
    # The stacks are copies: the file's pages need not stay in memory too.
    checkpoint.release_pages()
    return Loaded(spec=spec, stack=stack, checkpoint=checkpoint)


def save(destination: str | os.PathLike, spec: ArchSpec, stack: Stack, *, kind: str = MODEL,
         method: str | None = None, options: Mapping[str, Any] | None = None,
         source: Loaded | Checkpoint | None = None, force: bool = False,
         dtype: torch.dtype | None = None, stdout: BinaryIO | None = None) -> str:
    """Write (spec, stack) as the family's plain checkpoint with lg metadata.

    `dtype` defaults to the source's dtype (so fp16 in, fp16 out). Returns the
    written file's sha256.
    """
    parent = source.checkpoint if isinstance(source, Loaded) else source
    check_output(destination, force=force, inputs=(parent.source,) if parent else ())
    adapter = get_adapter(spec.family)
    state = adapter.from_stack(spec, stack)
    target_dtype = dtype or (_dominant_dtype(parent.tensors) if parent else None)
    if target_dtype is not None:
        state = {k: v.to(target_dtype) if v.is_floating_point() else v for k, v in state.items()}
    metadata = provenance_metadata(kind=kind, family=spec.family, config=adapter.config(spec),
                                   method=method, options=options, source=parent)
    return write_checkpoint(destination, state, metadata, force=force, stdout=stdout)


def load_model(source: str | os.PathLike | Checkpoint, heads: int | None = None,
               *, stdin: BinaryIO | None = None) -> tuple[nn.Module, ArchSpec]:
    """A timm model built from a checkpoint and loaded strictly (float32)."""
    loaded = load(source, heads=heads, stdin=stdin)
    model = get_adapter(loaded.spec.family).load_model(loaded.spec, loaded.stack)
    return model.float(), loaded.spec


def spec_of_model(model: nn.Module, family: str = "vit") -> tuple[ArchSpec, Stack]:
    """(spec, stack) of a live timm model."""
    adapter = get_adapter(family)
    config = adapter.spec_of_model(model)
    return adapter.to_stack({k: v.detach() for k, v in model.state_dict().items()}, config=config)


def save_model(model: nn.Module, destination: str | os.PathLike, *, method: str | None = None,
               options: Mapping[str, Any] | None = None, source: Loaded | Checkpoint | None = None,
               force: bool = False, dtype: torch.dtype | None = None, family: str = "vit",
               stdout: BinaryIO | None = None) -> str:
    """Write a live timm model with lg metadata (heads, pooling, provenance)."""
    spec, stack = spec_of_model(model, family)
    return save(destination, spec, stack, method=method, options=options, source=source,
                force=force, dtype=dtype or next(model.parameters()).dtype, stdout=stdout)


def create_model(spec: ArchSpec, seed: int | None = None) -> nn.Module:
    """The family's own random initialisation of the architecture `spec` describes."""
    return get_adapter(spec.family).create_model(spec, seed=seed)


def parameter_groups(stack: Stack) -> dict[str, int]:
    """Parameter counts: transformer blocks, embeddings, final norms, classifier head."""
    groups = {"blocks": 0, "embeddings": 0, "norm": 0, "head": 0}
    for role, named in stack.layers.items():
        groups["blocks"] += named.data.numel()
    for role, named in stack.globals.items():
        if role.startswith("head"):
            group = "head"
        elif "norm" in role:
            group = "norm"
        else:
            group = "embeddings"
        groups[group] += named.data.numel()
    groups["total"] = sum(groups.values())
    return groups


def inspect_checkpoint(source: str | os.PathLike | Checkpoint, heads: int | None = None,
                       *, stdin: BinaryIO | None = None) -> dict[str, Any]:
    """Everything `lg inspect` reports, as a JSON-ready dict."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
    lg = checkpoint.lg
    loaded = load(checkpoint, heads=heads)
    spec = loaded.spec
    adapter = get_adapter(spec.family)
    dtypes: dict[str, int] = {}
    for tensor in checkpoint.tensors.values():
        name = str(tensor.dtype).replace("torch.", "")
        dtypes[name] = dtypes.get(name, 0) + tensor.numel()
    shown_path = "<file>" if checkpoint.source == STDIO else checkpoint.source
    e = spec.extras
    return {
        "file": checkpoint.source,
        "sha256": checkpoint.sha256,
        "bytes": checkpoint.nbytes,
        "kind": lg.get("kind", MODEL),
        "family": spec.family,
        "depth": spec.depth,
        "width": spec.width,
        "heads": spec.heads,
        "heads_assumed": spec.heads_assumed,
        "head_dim": spec.head_dim,
        "mlp_dim": spec.mlp_dim,
        "patch_size": e.get("patch_size"),
        "img_size": e.get("img_size"),
        "in_chans": e.get("in_chans"),
        "num_classes": e.get("num_classes"),
        "prefix_tokens": e.get("prefix_tokens"),
        "pooling": e.get("global_pool"),
        "parameters": parameter_groups(loaded.stack),
        "dtypes": dtypes,
        "config": adapter.config(spec),
        "provenance": provenance_chain(lg) if lg else [],
        "load_call": adapter.load_call(spec, shown_path),
    }


def _dominant_dtype(tensors: Mapping[str, torch.Tensor]) -> torch.dtype | None:
    counts: dict[torch.dtype, int] = {}
    for t in tensors.values():
        if t.is_floating_point():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.get) if counts else None
