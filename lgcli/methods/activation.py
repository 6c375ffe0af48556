"""Activation importance (Minitron, Muralidharan et al. 2024; SPEC.md
"Data-aware resizing"): keep the MLP neurons, attention heads and embedding
channels that are most active on calibration data.

- MLP neurons: per block, the F' of largest mean |activation| entering the
  down projection (gate·up for a gated MLP).
- Heads: per block, the H' whose output entering the output projection has
  the largest mean norm. With grouped-query attention a key/value head is
  kept or dropped with all the query heads it serves (a group's score is
  the sum of its heads'); a target that keeps every key/value head and
  fewer queries per group keeps the most important queries of each group.
- Embedding channels: the D' of largest mean |value| at the norms' outputs,
  summed over blocks; one choice for every tensor on the residual stream.

On a Swin each stage is measured and resized on its own
(`methods.stages`): its embedding channels by its own norms, the patch
merging before it on its input side by the previous stage's choice.

Kept elements stay in their original order. Depth keeps the first N blocks,
as weight selection does: this method measures width only
(`block-influence` and `angular` measure depth).
"""

from __future__ import annotations

from typing import Any

from ..errors import LgError
from ..lazy import torch
from ..stack import ATTN, EMBED, HEADS, KV, MLP, STAGE_IN, ArchSpec, Stack
from .calibrated import CALIBRATION_OPTIONS, most_important, selected_stack, uniform
from .common import SHRINK, AxisChange, Method, MethodContext, MethodResult


def head_choice(scores: torch.Tensor, source: ArchSpec, target: ArchSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(query heads, key/value heads) kept per block, each (L, count), from
    the heads' scores (L, H). Query head h reads key/value head h // g (g
    query heads per key/value head, as transformers' repeat_kv lays them)."""
    layers = scores.shape[0]
    heads, kv = source.heads, source.key_value_heads
    new_heads, new_kv = target.heads, target.key_value_heads
    group, new_group = heads // kv, new_heads // new_kv
    grouped = scores.reshape(layers, kv, group)
    if group == new_group:  # whole groups kept or dropped
        groups = most_important(grouped.sum(-1), new_kv)
        kept = (groups[..., None] * group + torch.arange(group)).reshape(layers, new_heads)
        return kept, groups
    within = most_important(grouped, new_group)  # every key/value head kept
    kept = (torch.arange(kv)[:, None] * group + within).reshape(layers, new_heads)
    return kept, torch.arange(kv).expand(layers, kv)


def channels(heads: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The rows of a flat (heads x head_dim) axis that the kept heads own."""
    return (heads[..., None] * head_dim + torch.arange(head_dim)).reshape(heads.shape[0], -1)


def validate(options: dict[str, Any], source: ArchSpec, target: ArchSpec, direction: str) -> None:
    group, new_group = source.heads // source.key_value_heads, target.heads // target.key_value_heads
    if group != new_group and target.key_value_heads != source.key_value_heads:
        raise LgError(f"activation keeps grouped-query groups whole ({group} query heads per key/value head: "
                      f"--kv-heads {target.heads // group}) or every key/value head "
                      f"(--kv-heads {source.key_value_heads}); {target.heads} heads over {target.key_value_heads} "
                      f"key/value heads is neither")


def activation(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
               context: MethodContext) -> MethodResult:
    statistics = context.calibration
    layers = list(range(target.depth))  # first N, as weight selection
    report: dict[str, Any] = {"calibration": statistics.describe(), "kept_layers": layers}
    heads = kv = None
    if target.heads != source.heads or target.key_value_heads != source.key_value_heads:
        heads, kv = head_choice(statistics.heads.float(), source, target)
        report["kept_heads"] = heads[:target.depth].tolist()
        report["kept_kv_heads"] = kv[:target.depth].tolist()
    if target.width != source.width:
        report["kept_embed"] = most_important(statistics.embed.float(), target.width).tolist()
    if target.mlp_dim != source.mlp_dim:
        report["kept_mlp"] = most_important(statistics.mlp.float(), target.mlp_dim)[:target.depth].tolist()

    def indices(change: AxisChange) -> torch.Tensor:
        if change.axis == EMBED:
            return most_important(statistics.embed.float(), change.target)
        if change.axis == MLP:
            return most_important(statistics.mlp.float(), change.target)
        if change.axis == ATTN:
            return channels(heads, source.head_dim)
        if change.axis == KV:
            return channels(kv, source.head_dim)
        if change.axis == HEADS:
            return heads
        if change.axis == STAGE_IN and statistics.input_embed is not None:
            # One stage of a Swin: the patch merging before it reads the
            # previous stage's channels, so it keeps the ones that stage's
            # embedding kept (the same rule on the same statistics).
            return most_important(statistics.input_embed.float(), change.target)
        return uniform(change)

    return MethodResult(selected_stack(stack, source, target, layers, indices), report)


METHOD = Method("activation", activation, (SHRINK,),
                "Minitron: keep the most active MLP neurons, heads (grouped-query groups whole) and embedding "
                "channels on calibration data", options=CALIBRATION_OPTIONS, validate=validate,
                calibrated=True, keeps_first_layers=True)
