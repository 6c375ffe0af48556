"""What the data-aware methods share (SPEC.md "Data-aware resizing"): the
options that name the calibration data, and the selection of layers and of
per-layer channels the statistics choose.

A data-aware method is a `Method` with ``calibrated=True``: `lgcli.resize`
gathers the source's statistics (`lgcli.calibration`) before it runs and
hands them over in `MethodContext.calibration`. The method still sees only
the Stack and the statistics, never key names.
"""

from __future__ import annotations

from typing import Callable

from ..lazy import torch
from ..options import Option
from ..stack import LAYER, ArchSpec, Named, Stack
from .common import AxisChange, axis_changes, per_role, release, select_along, uniform_indices

CALIBRATION_NEEDED = ("a data-aware method measures the model on data: give --calibrate DATA (lg's datasets such as "
                      "fashion-mnist-mini or kjv-mini, an image folder, or a text file)")
CALIBRATION_OPTIONS = (
    Option("calibrate", str, None,
           "Data the statistics are measured on: lg's datasets (fashion-mnist-mini, kjv-mini, ...), an image "
           "folder or a text file (required; lg shrink given it without --method measures the depth by "
           "block-ablation and the width by activation)."),
    Option("calibrate_samples", int, None,
           "Examples (images, or windows of text) the statistics are measured on [default: 64].", minimum=1),
    Option("calibrate_seq_len", int, None, "Tokens per text window [default: min(128, the model's positions)].",
           minimum=2),
)

# indices(change) along an axis: a (k,) tensor shared by every layer, or an
# (L_source, k) tensor holding each source layer's own indices.
Indices = Callable[[AxisChange], "torch.Tensor"]


def most_important(scores: torch.Tensor, keep: int) -> torch.Tensor:
    """The indices of the `keep` largest scores along the last axis, in their
    original order; ties go to the earlier index (a stable sort), so the
    choice is a pure function of the scores."""
    order = torch.sort(-scores, dim=-1, stable=True).indices[..., :keep]
    return order.sort(dim=-1).values


def uniform(change: AxisChange) -> torch.Tensor:
    """Weight selection's indices (the axes a method does not measure)."""
    return uniform_indices(change.source, change.target)


def selected_stack(stack: Stack, source: ArchSpec, target: ArchSpec, layers: list[int],
                   indices: Indices) -> Stack:
    """The target stack whose per-layer roles take source layers `layers`, in
    that order, and whose every other changed axis keeps the elements
    `indices` names (per layer where it gives a row per source layer)."""
    cache: dict[str, torch.Tensor] = {}

    def along(change: AxisChange) -> torch.Tensor:
        if change.axis not in cache:
            cache[change.axis] = indices(change)
        return cache[change.axis]

    def pick(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        changes = axis_changes(named, source, target, skip=(LAYER,))
        shared = [c for c in changes if along(c).dim() == 1]
        own = [c for c in changes if along(c).dim() == 2]
        if own and not per_layer:
            raise RuntimeError(f"{role}: per-layer indices along {own[0].axis} for a global tensor")
        data = named.layers(layers) if per_layer and layers != list(range(source.depth)) else release(named)
        data = select_along(data, shared, along)
        for change in own:
            rows = along(change)[layers]
            data = torch.stack([data[i].index_select(change.dim - 1, rows[i].to(data.device))
                                for i in range(len(layers))])
        return data

    return per_role(stack, target, pick)
