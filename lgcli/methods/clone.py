"""Function-preserving growth (Net2Net / HyperCloning), SPEC.md "Baselines".

Width: every changed axis is tiled `n = target / source` times; along a
linear weight's input axis the copies are divided by n, so
``W' = W.repeat(n_out, n_in) / n_in`` (SPEC). With x' = x.repeat(n) this gives
W' x' = (W x).repeat(n_out): the hidden state of the grown model is the
source's, tiled. LayerNorm sees the same mean and variance on a tiled vector,
GELU is elementwise, and the head divides by n again, so the logits are the
source's.

Attention needs the head dim fixed: tiling the flat attn axis (heads x d) then
tiles whole heads, each head's q.k uses the same 1/sqrt(d) scale, and o's
columns (an input axis, divided by n) sum the repeated heads back. Changing d
would split heads across the tiling, so clone refuses it.

Grouped-query attention: k and v (the `kv` axis) are tiled as q is, so query
head i + H (a copy of head i) reads key/value head (i + H) // g = i // g + H_kv,
the copy of the one head i reads (g = H / H_kv is kept).

Lookup tables (token, position and token-type embeddings) are tiled and not
divided: their embed axis is an output. A tied LM head reads the token table
as a linear map whose input is the tiled hidden state, so its logits would be
n times the source's: the norm just before it (`ArchSpec.tied_head_input`) is
divided by n instead, which a LayerNorm's or RMSNorm's weight and bias carry
straight to the head's input.

Depth: new blocks whose output projections o and fc2 (and their biases) are
zero, so each starts as the identity on the residual stream (a pre-norm
block; a post-norm one, BERT's, still normalises its output, so for BERT
depth growth keeps the function only up to that norm). Their other
tensors copy the source layer they follow, so that they compute that layer's
features once o / fc2 move off zero.
"""

from __future__ import annotations

from typing import Any

from ..errors import LgError
from ..lazy import torch
from ..stack import ATTN, KV, LAYER, ArchSpec, Named, Stack
from ..options import Option
from .common import (GROW, SHRINK, Method, MethodContext, MethodResult, as_compute, axis_changes,
                     is_linear_weight, per_role)

OPTIONS = (Option("insert", str, "interleave", "where new identity blocks go: spread between the "
                  "source's layers, or all on top", choices=("interleave", "top")),)
# The residual-branch outputs: zero makes a block the identity.
BRANCH_OUTPUT_ROLES = ("o", "o_bias", "fc2", "fc2_bias")


def validate(source: ArchSpec, target: ArchSpec) -> None:
    if target.head_dim != source.head_dim:
        raise LgError(f"clone keeps the head dim ({source.head_dim}) so repeated heads compute the "
                      f"same attention: use --heads {target.width // source.head_dim} "
                      f"or another method")
    before, after = source.axis_sizes(), target.axis_sizes()
    if after[KV] * before[ATTN] != after[ATTN] * before[KV]:
        raise LgError(f"clone tiles query and key/value heads alike: {source.heads} heads with "
                      f"{source.key_value_heads} key/value heads cannot become {target.heads} with "
                      f"{target.key_value_heads} (keep the group size; leave out --kv-heads)")
    for axis, size in after.items():
        if axis != LAYER and size % before[axis]:
            valid = ", ".join(str(before["embed"] * k) for k in range(1, 5))
            raise LgError(f"clone grows width by whole multiples: {axis} {before[axis]} -> {size} is not "
                          f"one (valid widths: {valid}, ...)")


def width_step(source: ArchSpec, target: ArchSpec) -> tuple[str, str] | None:
    """(direction, flags) of the `lg grow` or `lg shrink` that gives a model of
    `source` the width, heads and MLP of `target` (its depth kept), for hints
    that must work as printed: every size stated, clone when it keeps the
    function (a grow by whole multiples), else the direction's default
    method. None when some of those sizes grow and others shrink."""
    def sizes(spec: ArchSpec) -> tuple[int, ...]:
        return spec.width, spec.heads, spec.key_value_heads, spec.head_dim, spec.mlp_dim

    before, after = sizes(source), sizes(target)
    if all(a >= b for a, b in zip(after, before)):
        direction = GROW
    elif all(a <= b for a, b in zip(after, before)):
        direction = SHRINK
    else:
        return None
    flags = f"--width {target.width} --heads {target.heads} --mlp-dim {target.mlp_dim}"
    if source.kv_heads is not None or target.kv_heads is not None:
        flags += f" --kv-heads {target.key_value_heads}"
    if direction == GROW:
        try:
            validate(source.with_sizes(depth=target.depth), target)
            flags += " --method clone"
        except LgError:
            pass  # not whole multiples: the default method
    return direction, flags


def insertion_plan(source_depth: int, target_depth: int, insert: str) -> list[tuple[int, bool]]:
    """For every target layer, (source layer it copies, whether it is a new
    identity block). `interleave` spreads the k new blocks evenly: after source
    layer l (1-based) come floor(l k / L) - floor((l - 1) k / L) of them;
    `top` puts them all after the last layer."""
    new = target_depth - source_depth
    plan: list[tuple[int, bool]] = []
    for layer in range(source_depth):
        plan.append((layer, False))
        if insert == "top":
            count = new if layer == source_depth - 1 else 0
        else:
            count = (layer + 1) * new // source_depth - layer * new // source_depth
        plan.extend((layer, True) for _ in range(count))
    return plan


def tile(named: Named, source: ArchSpec, target: ArchSpec, role: str | None = None) -> torch.Tensor:
    """Width growth by repetition, divided along a linear weight's input axis."""
    data = named.data
    changes = axis_changes(named, source, target, skip=(LAYER,))
    if not changes:
        return data
    data = as_compute(data)
    input_dim = len(named.axes) - 1 if is_linear_weight(named, role) else None
    for change in changes:
        copies = change.target // change.source
        repeats = [1] * data.dim()
        repeats[change.dim] = copies
        data = data.repeat(*repeats)
        if change.dim == input_dim:
            data = data / copies
    return data


def clone(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
          context: MethodContext) -> MethodResult:
    validate(source, target)
    plan = insertion_plan(source.depth, target.depth, options["insert"])
    copied = torch.tensor([layer for layer, _ in plan])
    new_positions = [i for i, (_, is_new) in enumerate(plan) if is_new]

    width_factor = target.width // source.width

    def grow(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        data = tile(named, source, target, role)
        if role in target.tied_head_input and width_factor > 1:
            data = data / width_factor  # the tied head sums n copies of its input
        if not per_layer or not new_positions:
            return data
        data = data.index_select(0, copied.to(data.device))
        if role in BRANCH_OUTPUT_ROLES:
            data[new_positions] = 0
        return data

    report = {"insert": options["insert"], "new_layers": new_positions,
              "width_factor": width_factor}
    return MethodResult(per_role(stack, target, grow), report)


METHOD = Method("clone", clone, (GROW,), "function-preserving growth: tiled width, identity blocks for depth",
                OPTIONS, lambda options, source, target, direction: validate(source, target))
