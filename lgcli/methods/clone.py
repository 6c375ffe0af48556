"""Function-preserving growth (Net2Net / HyperCloning / LEMON), SPEC.md "Baselines".

Width by copies. Every widened axis but the residual width takes target
index j from source index j mod s (s the source size): whole copies when the
sizes divide, and the first t mod s elements once more when they do not
(Net2WiderNet's mapping). Along a linear weight's input axis each copy of
element i is divided by c_i, the number of copies of i, so the copies sum
back to the source's weight. For multiples this is SPEC's
``W' = W.repeat(n_out, n_in) / n_in``: with x' = x.repeat(n), W' x' =
(W x).repeat(n_out). MLP neurons pass through an elementwise activation (and
SwiGLU's product), so a copied neuron computes what its source computes.

Attention needs the head dim fixed: the attn axis (heads x d) is then copied
a whole head at a time (t and s are multiples of d), each head's q.k uses the
same 1/sqrt(d) scale, and o's columns, divided by each head's copies, sum
the repeated heads back. Changing d would split heads, so clone refuses it.
Grouped-query attention, H query heads in groups of g = H / H_kv and H' in
groups of g' = H' / H_kv': query head j, a copy of head j mod H, reads
key/value head j // g', and the source's head j mod H read (j mod H) // g.
So new key/value head m copies source head ((m g') mod H) // g: when g'
divides g (and so H) the g' query heads of group m, copies of heads
(m g') mod H + 0 .. g' - 1, lie inside one source group and all read that
head, as their sources did. g' = g tiles the key/value heads as q is tiled
(m mod H_kv); H' = H repeats each one H_kv' / H_kv times (GQA -> MHA: m //
(H_kv' / H_kv)). A g' that does not divide g puts the source's group
boundary at head g (g < H' when H_kv > 1) strictly inside one new group,
whose query heads then read copies of two different heads: clone refuses
it, unless H_kv = 1 (every query head reads the one head, and any g' keeps
that). The `kv` axis is an output of k and v only (attention reads it), so
nothing is divided along it.

The residual width D takes the same copies when D' is a multiple of D: a
tiled vector has its source's mean and mean square, so every LayerNorm and
RMSNorm gives its output tiled, on every family. Lookup tables (token,
position and token-type embeddings) are tiled and not divided: their embed
axis is an output. A tied LM head reads the token table as a linear map whose
input is the tiled hidden state, so its logits would be n times the source's:
the norm just before it (`ArchSpec.tied_head_input`) is divided by n instead.

At any other D' the copies would change each norm's statistics; new channels
that every norm ignores are appended instead (after LEMON, Wang et al. 2024,
"lossless width expansion" with its average expansion for LayerNorm).
Everything that writes to the residual stream (embeddings, tokens, patch
embedding, the branch outputs o and fc2 and their biases) writes
s = sqrt(D'/D) times its old values into the old channels and, into each new
one, s times the mean of its old channels for LayerNorm families, or 0 for
RMSNorm ones (`ArchSpec.rms_norm`). The stream is then s x on the old
channels and s mean(x) (or 0) on the new ones: a LayerNorm over D' sees the
source's mean times s and exactly its variance (s^2 D/D' = 1), an RMSNorm
exactly its mean square, epsilon included. Each norm's weight is divided by s
and its bias is 0 on the new channels, so its output is the source's on the
old channels and 0 on the new ones, which the readers (q, k, v, fc1, gate,
the head) therefore never feel. A tied head reads the token table, now s
times its old values: the norm before it is divided by s once more. A layer
scale (ls1, ls2) multiplies its branch's output: that branch writes s times
the mean of ls * output into a new channel, whose scale is 1. Readers'
columns for the new channels are copies (any value keeps the function;
copies give the new channels a gradient, where zeros would leave them
dead). This needs a stream that starts as a sum of embeddings and blocks
that normalise before their branch: a stream that starts at a norm's output
(`ArchSpec.normed_input`: BERT, CLIP, a timm ViT with norm_pre, Swin) or is
renormalised after each sum (BERT) cannot hold the mean in its new
channels, and a Swin's patch merging normalises four neighbours at once; for
those clone keeps to whole multiples.

Depth: new blocks whose output projections o and fc2 (and their biases) are
zero, so each starts as the identity on the residual stream (a pre-norm
block; a post-norm one, BERT's, still normalises its output, so for BERT
depth growth keeps the function only up to that norm). Their other
tensors copy the source layer they follow, so that they compute that layer's
features once o / fc2 move off zero.

Copies of a neuron or head receive equal gradients, so training keeps them
equal (Net2Net's symmetry): clone does not break it.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import LgError
from ..lazy import torch
from ..stack import EMBED, KV, LAYER, NORM_BIAS_ROLES, NORM_WEIGHT_ROLES, ArchSpec, Named, Stack, index_along
from ..options import Option
from .common import (GROW, SHRINK, Method, MethodContext, MethodResult, as_compute, axis_changes,
                     is_linear_weight, per_role)

OPTIONS = (Option("insert", str, "interleave", "where new identity blocks go: spread between the "
                  "source's layers, or all on top", choices=("interleave", "top")),)
# The residual-branch outputs: zero makes a block the identity.
BRANCH_OUTPUT_ROLES = ("o", "o_bias", "fc2", "fc2_bias")
# The layer scale that multiplies each branch output (DINOv2, CaiT-style ViTs).
BRANCH_SCALE = {"o": "ls1", "o_bias": "ls1", "fc2": "ls2", "fc2_bias": "ls2"}
LAYER_SCALE_ROLES = frozenset(BRANCH_SCALE.values())
MEAN, ZERO = "mean", "zero"


def validate(source: ArchSpec, target: ArchSpec) -> None:
    if target.head_dim != source.head_dim:
        raise LgError(f"clone keeps the head dim ({source.head_dim}) so repeated heads compute the "
                      f"same attention: use --heads {target.width // source.head_dim} "
                      f"or another method")
    before, after = source.axis_sizes(), target.axis_sizes()
    group = source.heads // source.key_value_heads
    new_group = target.heads // target.key_value_heads if target.heads % target.key_value_heads == 0 else 0
    if source.key_value_heads > 1 and (not new_group or group % new_group):
        # The --kv-heads that keep the function: H' / g' for each divisor g' of g that divides H'.
        valid = ", ".join(str(target.heads // g) for g in range(1, group + 1)
                          if group % g == 0 and target.heads % g == 0)
        raise LgError(f"clone keeps the function where each new key/value group lies inside one of the source's "
                      f"({source.heads} heads in groups of {group}), and {target.heads} heads with "
                      f"{target.key_value_heads} key/value heads do not (valid --kv-heads: {valid}; "
                      f"or another method)")
    for axis, size in after.items():
        if axis != LAYER and size < before[axis]:
            raise LgError(f"clone only grows: {axis} {before[axis]} -> {size} is smaller")
    if target.width % source.width:
        reason = whole_multiples_only(source)
        if reason:
            valid = ", ".join(str(source.width * k) for k in range(1, 5))
            raise LgError(f"clone grows width by whole multiples on this model, {reason}: "
                          f"{source.width} -> {target.width} is not one (valid widths: {valid}, ...)")


def whole_multiples_only(source: ArchSpec) -> str | None:
    """Why new residual channels would change what some norm computes (the
    module docstring), so only tiled widths keep the function; None when
    they keep it."""
    if source.stage_input is not None:
        return "whose stages start from a patch merging that normalises four neighbours at once"
    if source.post_norm:
        return "whose blocks normalise after the residual sum"
    if source.normed_input:
        return "whose residual stream starts at a norm's output"
    return None


def padding(source: ArchSpec, target: ArchSpec) -> str | None:
    """How the residual stream's new channels are filled: None when the
    width is tiled (a whole multiple), else the mean of the old channels
    (LayerNorm families) or zero (RMSNorm)."""
    if target.width % source.width == 0:
        return None
    return ZERO if source.rms_norm else MEAN


def width_step(source: ArchSpec, target: ArchSpec) -> tuple[str, str] | None:
    """(direction, flags) of the `lg grow` or `lg shrink` that gives a model of
    `source` the width, heads and MLP of `target` (its depth kept), for hints
    that must work as printed: every size stated, clone when it keeps the
    function (every size grows, and the width by whole multiples where the
    model needs them), else the direction's default
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
            pass  # clone cannot keep the function here: the default method
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


def copies(source: int, target: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(for each target index j, its source index j mod source; for each
    source index i, how many target indices copy it)."""
    index = torch.arange(target) % source
    return index, torch.bincount(index, minlength=source)


def kv_copies(source: ArchSpec, target: ArchSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """`copies` for the `kv` axis (the module docstring): for each target
    index, within new key/value head m, the same index within source head
    ((m g') mod H) // g; for each source index, how many copy it."""
    group, new_group = source.heads // source.key_value_heads, target.heads // target.key_value_heads
    heads = (torch.arange(target.key_value_heads) * new_group) % source.heads // group
    index = (heads[:, None] * source.head_dim + torch.arange(source.head_dim)).reshape(-1)
    return index, torch.bincount(index, minlength=source.kv_dim)


def widen(named: Named, source: ArchSpec, target: ArchSpec, role: str | None = None,
          branch_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Width growth by copies, divided along a linear weight's input axis;
    the residual axis padded where `padding` says (the module docstring).
    `branch_scale`: the layer scale that multiplies this branch output's
    residual axis, if any."""
    data = named.data
    changes = axis_changes(named, source, target, skip=(LAYER,))
    if not changes:
        return data
    data = as_compute(data)
    input_dim = len(named.axes) - 1 if is_linear_weight(named, role) else None
    pad = padding(source, target)
    for change in changes:
        index, count = kv_copies(source, target) if change.axis == KV else copies(change.source, change.target)
        index = index.to(data.device)
        if change.axis == EMBED and pad is not None:
            data = pad_residual(data, change.dim, index, pad, role, change.dim == input_dim, branch_scale)
            continue
        data = index_along(data, change.dim, index)
        if change.dim == input_dim:
            shape = [1] * data.dim()
            shape[change.dim] = change.target
            data = data / count.to(data)[index].reshape(shape)
    return data


def pad_residual(data: torch.Tensor, dim: int, index: torch.Tensor, pad: str, role: str | None,
                 is_input: bool, branch_scale: torch.Tensor | None) -> torch.Tensor:
    """One tensor's residual axis grown to `len(index)` channels, the new ones
    unseen by every norm (the module docstring): a norm's weight divided by
    s = sqrt(new / old), its bias 0 on the new channels, a layer scale 1
    there, a reader's new columns copies, and whatever writes to the stream
    writing s times its old values, and s times their mean (or 0) into each
    new channel."""
    old, new = data.shape[dim], len(index)
    grown = index_along(data, dim, index)
    fresh = [slice(None)] * data.dim()
    fresh[dim] = slice(old, new)
    fresh = tuple(fresh)
    stretch = math.sqrt(new / old)
    if role in NORM_WEIGHT_ROLES:
        return grown / stretch
    if is_input:
        return grown
    if role in NORM_BIAS_ROLES:
        grown[fresh] = 0
    elif role in LAYER_SCALE_ROLES:
        grown[fresh] = 1
    else:
        written = data if branch_scale is None else data * branch_scale.reshape(
            branch_scale.shape + (1,) * (data.dim() - branch_scale.dim()))
        grown = grown * stretch
        grown[fresh] = 0 if pad == ZERO else written.mean(dim, keepdim=True) * stretch
    return grown


def clone(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
          context: MethodContext) -> MethodResult:
    validate(source, target)
    plan = insertion_plan(source.depth, target.depth, options["insert"])
    copied = torch.tensor([layer for layer, _ in plan])
    new_positions = [i for i, (_, is_new) in enumerate(plan) if is_new]

    pad = padding(source, target)
    # A tied head sums n copies of its tiled input, or reads a token table
    # made s times larger (the docstring): the norm before it divides by that.
    head_divisor = target.width // source.width if pad is None else math.sqrt(target.width / source.width)

    def grow(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        scale = None
        if pad == MEAN and per_layer and BRANCH_SCALE.get(role) in stack.layers:
            scale = as_compute(stack.layers[BRANCH_SCALE[role]].data)
        data = widen(named, source, target, role, scale)
        if role in target.tied_head_input and head_divisor != 1:
            data = data / head_divisor
        if not per_layer or not new_positions:
            return data
        data = data.index_select(0, copied.to(data.device))
        if role in BRANCH_OUTPUT_ROLES:
            data[new_positions] = 0
        return data

    report = {"insert": options["insert"], "new_layers": new_positions,
              "width_factor": target.width // source.width if pad is None else target.width / source.width,
              "new_channels": "copies" if pad is None else pad}
    return MethodResult(per_role(stack, target, grow), report)


METHOD = Method("clone", clone, (GROW,),
                "function-preserving growth: neurons and heads copied, the width tiled or padded, identity "
                "blocks for depth", OPTIONS, lambda options, source, target, direction: validate(source, target))
