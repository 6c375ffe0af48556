"""One adapter per architecture family: state dict <-> (ArchSpec, Stack).

An adapter is the only code that knows a family's key names and layouts;
methods work on the canonical Stack alone. A family is declared as data
(`declared.Layout`) in its own file and registered here; `declared` reads
and writes every family's state dict.

Family modules (vit, timm_vit_names, swin, beit, gpt2, llama, bert, hf_vit,
hf_dinov2, hf_clip, hf_swin) never import one another; what they share is
in modules of no family (base, declared, hf_layout, hf, hf_image, timm,
timm_family, timm_staged, staged, shapes). A timm family declared as data
(`timm_family.TimmFamily`) is registered as `TimmAdapter(DECLARATION)`; one
of stages, with its `timm_staged.TimmStages`, as
`StagedTimmAdapter(DECLARATION, STAGES)`.
tests/test_arch_imports.py holds both lists and checks the imports.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import LgError
from ..lazy import nn, torch
from .base import FamilyAdapter, with_layer_sources
from .beit import BEIT
from .bert import BERT_ADAPTER
from .gpt2 import GPT2_ADAPTER
from .hf_clip import CLIP_VISION_ADAPTER
from .hf_dinov2 import DINOV2_ADAPTER, REGISTERS_ADAPTER
from .hf_swin import HF_SWIN_ADAPTER
from .hf_vit import DEIT_ADAPTER, VIT_ADAPTER
from .llama import LLAMA_ADAPTER
from .swin import SWIN, SWIN_STAGES
from .timm_family import TimmAdapter
from .timm_staged import StagedTimmAdapter
from .vit import VIT

# Family name -> adapter, in the order `detect_family` asks them.
ADAPTERS: dict[str, FamilyAdapter] = {}


def register(adapter: FamilyAdapter) -> None:
    """Make a family known to lg (detection, `get_adapter`)."""
    if adapter.family in ADAPTERS:
        raise ValueError(f"a family named {adapter.family!r} is registered already")
    ADAPTERS[adapter.family] = adapter


def unregister(family: str) -> None:
    """Forget a registered family (what `register` did, undone)."""
    del ADAPTERS[family]


# Swin before ViT: a timm hub folder's config.json is a ViT's unless Swin claims it (family_of_config);
# BEiT before ViT: its live models and state dicts have a ViT's patch_embed and blocks too.
for _adapter in (StagedTimmAdapter(SWIN, SWIN_STAGES), TimmAdapter(BEIT), TimmAdapter(VIT), GPT2_ADAPTER,
                 LLAMA_ADAPTER, BERT_ADAPTER, VIT_ADAPTER, DEIT_ADAPTER, DINOV2_ADAPTER, REGISTERS_ADAPTER,
                 CLIP_VISION_ADAPTER, HF_SWIN_ADAPTER):
    register(_adapter)


def get_adapter(family: str) -> FamilyAdapter:
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
                  f"(blocks.N.attn.qkv.weight, patch_embed.proj.weight, ...), a timm SwinTransformer "
                  f"(layers.N.blocks.M.attn.relative_position_bias_table, ...), a timm BEiT "
                  f"(blocks.N.attn.relative_position_bias_table, ...) or a Hugging Face GPT-2, Llama "
                  f"(Mistral, Qwen2) or BERT model; found {sample}")


def known_model_types() -> list[str]:
    """The config.json model_type values some adapter reads."""
    return [t for adapter in ADAPTERS.values() for t in getattr(getattr(adapter, "layout", None), "model_types", ())]


def family_of_config(config: Mapping) -> str | None:
    """The family whose adapter reads a Hugging Face config.json (its model_type)."""
    for family, adapter in ADAPTERS.items():
        if getattr(adapter, "recognises_config", None) and adapter.recognises_config(config):
            return family
    return None


def adapter_of_model(model: nn.Module) -> FamilyAdapter:
    """The adapter of the family a live model belongs to."""
    for adapter in ADAPTERS.values():
        if adapter.owns_model(model):
            return adapter
    raise LgError(f"{type(model).__name__} is not a model of a family lg knows ({', '.join(ADAPTERS)})")


__all__ = ["ADAPTERS", "FamilyAdapter", "adapter_of_model", "get_adapter", "detect_family", "family_of_config",
           "known_model_types", "register", "unregister", "with_layer_sources"]
