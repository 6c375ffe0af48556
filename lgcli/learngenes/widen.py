"""The globals of a WAVE descendant at a new width (`lg grow --widen`): the
patch and position embeddings, class token, final norm and head re-indexed
along their width axis so that they line up with Eq. 4's Kronecker blocks
(SPEC.md "WAVE"; docs/learngenes.md "Globals at a new width")."""

from __future__ import annotations

from typing import Mapping

from ..lazy import torch
from ..methods.common import is_linear_weight
from ..stack import EMBED, STAGE_IN, Named, index_along


def widen_index(source: int, target: int, layout: str) -> torch.Tensor:
    """For each target position along `embed`, the source position it copies.

    interleave: ``c' -> floor(c' source / target)``, so position ``c s + b``
    copies ``c`` when the width grows s times: the Kronecker layout of Eq. 4
    puts template column c at exactly those positions, so the globals line up
    with the blocks. tile: ``c' -> c' mod source`` (block repetition)."""
    positions = torch.arange(target)
    if layout == "tile":
        return positions % source
    return (positions * source) // target


def widen_globals(globals_: Mapping[str, Named], source: int, target: int, layout: str,
                  stage_in: tuple[int, int] | None = None) -> dict[str, Named]:
    """The globals at a new width: every `embed` axis re-indexed by
    `widen_index`; where `embed` is a linear layer's input (the head), the
    copies of a source column are divided by their number, so the head's
    output is unchanged when the features are copies. In a stage of a Swin,
    `stage_in` (the previous stage's width, source and target) re-indexes
    the patch merging's input axis by the same rule."""
    widths = {EMBED: (source, target), **({STAGE_IN: stage_in} if stage_in else {})}
    indices = {axis: widen_index(before, after, layout) for axis, (before, after) in widths.items() if before != after}
    if not indices:
        return dict(globals_)
    out = {}
    for role, named in globals_.items():
        data = named.data.float()
        for dim, axis in enumerate(named.axes):
            if axis in indices:
                index = indices[axis]
                data = index_along(data, dim, index)
                if is_linear_weight(named, role) and dim == data.dim() - 1:
                    copies = torch.bincount(index, minlength=widths[axis][0]).float()
                    data = data / copies[index]
        out[role] = Named(data, named.axes)
    return out
