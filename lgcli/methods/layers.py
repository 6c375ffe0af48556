"""Heur-LG and Auto-LG (WAVE appendix Eqs. A.3 / A.4, SPEC.md "Baselines"):
inherit whole layers, initialise the rest at random.

- heur-lg: the last N source layers become the top N target layers; the
  layers below are timm's random initialisation.
- auto-lg: the first N source layers become the bottom N target layers; the
  layers above are random.

N = min(source depth, target depth). The papers keep the width; when the width
changes too, the inherited tensors (and the globals) change width the way
weight selection does: the uniform element indices of SPEC "Baselines" pick
the kept elements when shrinking, and when growing the source values are
written at those same positions of the random target (so `select` undoes it).
"""

from __future__ import annotations

from typing import Any

from ..errors import LgError
from ..lazy import torch
from ..stack import LAYER, ArchSpec, Named, Stack
from .common import (GROW, SHRINK, AxisChange, Method, MethodContext, MethodResult, axis_changes,
                     embed_into, per_role, release, select_along, uniform_indices)


def heur_lg(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
            context: MethodContext) -> MethodResult:
    return _inherit_layers(stack, source, target, context, from_top=True)


def auto_lg(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
            context: MethodContext) -> MethodResult:
    return _inherit_layers(stack, source, target, context, from_top=False)


def _width_indices(change: AxisChange) -> torch.Tensor:
    small, large = sorted((change.source, change.target))
    return uniform_indices(large, small)


def _inherit_layers(stack: Stack, source: ArchSpec, target: ArchSpec, context: MethodContext,
                    *, from_top: bool) -> MethodResult:
    kept = min(source.depth, target.depth)
    source_layers = torch.arange(source.depth - kept, source.depth) if from_top else torch.arange(kept)
    target_layers = torch.arange(target.depth - kept, target.depth) if from_top else torch.arange(kept)
    growing = context.direction == "grow"
    if growing and context.random_stack is None:
        raise LgError("heur-lg/auto-lg need the family's random initialisation to grow")
    # timm draws a model's initialisation in one sequence, so the random target
    # is made whole, once, when the first role asks for it: growing with these
    # methods holds the target's size in memory (the other methods hold a role).
    random: list[Stack] = []

    def inherit(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        changes = axis_changes(named, source, target, skip=(LAYER,))
        # Only the inherited layers are read (from the file, when lazy).
        data = named.layers(source_layers.tolist()) if per_layer else release(named)
        if not growing:
            return select_along(data, changes, _width_indices)
        if not random:
            random.append(context.random_stack(target))
        backdrop = (random[0].layers if per_layer else random[0].globals)[role].data
        if per_layer:
            out = backdrop.clone()
            region = out.index_select(0, target_layers)
            out[target_layers] = embed_into(region, data, changes, _width_indices)
            return out
        return embed_into(backdrop, data, changes, _width_indices)

    random_layers = sorted(set(range(target.depth)) - set(target_layers.tolist()))
    report = {"inherited": dict(zip(map(str, target_layers.tolist()), source_layers.tolist())),
              "random_layers": random_layers, "seed": context.seed}
    return MethodResult(per_role(stack, target, inherit), report)


HEUR_LG = Method("heur-lg", heur_lg, (SHRINK, GROW), "Heur-LG: the last N source layers on top, random layers below")
AUTO_LG = Method("auto-lg", auto_lg, (SHRINK, GROW),
                 "Auto-LG: the first N source layers at the bottom, random layers above")
