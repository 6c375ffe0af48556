"""Weight selection (Xu et al. 2024), SPEC.md "Baselines": a smaller model
initialised with a subset of a larger one's weights.

Depth: the first N layers. Every other axis: the uniform element indices of
`common.uniform_indices`. Indices depend only on the axis kind and its sizes,
so q, k and v rows, their biases and o's columns are sliced consistently, and
every tensor along the residual stream keeps the same embed elements.
The flat attn axis is sliced as the paper does (heads x head_dim as one axis).
"""

from __future__ import annotations

from typing import Any

from ..lazy import torch
from ..stack import LAYER, ArchSpec, Named, Stack
from .common import (SHRINK, AxisChange, Method, MethodContext, MethodResult, axis_changes, per_role,
                     release, select_along, uniform_indices)


def selection_indices(change: AxisChange) -> torch.Tensor:
    """First-N layers along depth; uniform element selection elsewhere."""
    if change.axis == LAYER:
        return torch.arange(change.target)
    return uniform_indices(change.source, change.target)


def select(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
           context: MethodContext) -> MethodResult:
    def pick(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        changes = axis_changes(named, source, target)
        if per_layer and any(change.axis == LAYER for change in changes):
            # The first N layers only are read (from the file, when lazy).
            return select_along(named.layers(list(range(target.depth))),
                                [c for c in changes if c.axis != LAYER], selection_indices)
        return select_along(release(named), changes, selection_indices)

    out = per_role(stack, target, pick)
    sizes = {axis: (source.axis_sizes()[axis], size) for axis, size in target.axis_sizes().items()
             if source.axis_sizes()[axis] != size}
    report = {"indices": {axis: selection_indices(AxisChange(0, axis, a, b)).tolist()[:16]
                          for axis, (a, b) in sizes.items()}}
    return MethodResult(out, report)


METHOD = Method("select", select, (SHRINK,), "weight selection: first-N layers, uniformly spaced elements",
                keeps_first_layers=True)
