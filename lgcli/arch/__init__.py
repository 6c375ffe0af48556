"""One adapter per architecture family: state dict <-> (ArchSpec, Stack).

An adapter is the only code that knows a family's key names and layouts;
methods work on the canonical Stack alone.
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..errors import LgError
from .vit import VitAdapter

ADAPTERS = {VitAdapter.family: VitAdapter()}


def get_adapter(family: str) -> VitAdapter:
    try:
        return ADAPTERS[family]
    except KeyError:
        raise LgError(f"unknown architecture family {family!r} (known: {', '.join(ADAPTERS)})") from None


def detect_family(state_dict: Mapping[str, torch.Tensor]) -> str:
    """The family whose adapter recognises these keys."""
    for family, adapter in ADAPTERS.items():
        if adapter.recognises(state_dict):
            return family
    sample = ", ".join(sorted(state_dict)[:3]) or "no tensors"
    raise LgError(f"not a checkpoint lg knows: expected a timm VisionTransformer "
                  f"(blocks.N.attn.qkv.weight, patch_embed.proj.weight, ...); found {sample}")


__all__ = ["ADAPTERS", "get_adapter", "detect_family", "VitAdapter"]
