"""What every resize method shares: its calling convention, and the per-axis
view of a size change (methods resize axes by name, never by key names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from ..lazy import torch
from ..options import Option
from ..stack import (ATTN, CLASSES, EMBED, EMBEDDING_ROLES, FIXED, KV, LAYER, MLP, STAGE_IN, VOCAB, ArchSpec,
                     Named, RoleMap, SourceRole, Stack, axes_and_shape, index_along, target_shape)

GROW, SHRINK = "grow", "shrink"


@dataclass
class MethodContext:
    """What a method may need besides the stack: the direction asked for, a
    seed, and the family's random initialisation (for heur-lg / auto-lg)."""

    direction: str
    seed: int | None = None
    random_stack: Callable[[ArchSpec], Stack] | None = None
    # The source's statistics on calibration data (`lgcli.calibration`),
    # gathered for the methods declared `calibrated`.
    calibration: Any = None
    # Where a method that runs for long says how far it is (stderr in the
    # CLI); None: it says nothing.
    notify: Callable[[str], None] | None = None


@dataclass
class MethodResult:
    stack: Stack
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Method:
    """A training-free resize method, declared in its own file.

    `run(stack, source_spec, target_spec, options, context)` returns a
    MethodResult; `options` are the method's own (declared in `options`, from
    which the CLI builds its flags); `validate(options, source, target,
    direction)` may refuse a request before any work, with an LgError.
    `not_per_stage` says why the method has no meaning on the stages of a
    hierarchical model (Swin), None when it runs on each stage
    (`methods.stages`). `calibrated` methods read the source's statistics on
    the user's data (`MethodContext.calibration`; `methods.calibrated`).
    `depth_only`: the method keeps the width, heads and
    MLP (it copies whole layers); a request that changes them too is refused
    with the pipe that makes it, this method for the depth then another for
    the width (`sizing.WidthKept`). `keeps_first_layers`: the result's block
    i is the source's block i (a shallower result keeps the first blocks),
    which `lg distill --hidden-weight` reads from a file's provenance to
    match its blocks with its source's (`lgcli.hidden_states`); a method
    that chooses its layers records them instead (`kept_layers`).
    """

    name: str
    run: Callable[[Stack, ArchSpec, ArchSpec, dict[str, Any], MethodContext], MethodResult]
    directions: tuple[str, ...]
    summary: str
    options: tuple[Option, ...] = ()
    validate: Callable[[dict[str, Any], ArchSpec, ArchSpec, str], None] | None = None
    not_per_stage: str | None = None
    calibrated: bool = False
    depth_only: bool = False
    keeps_first_layers: bool = False
    # A calibrated method's passes over the calibration examples after the one that gathers the statistics
    # (block ablation's, with blocks skipped), for (source, target, options): a dry run's time estimate.
    extra_passes: Callable[[ArchSpec, ArchSpec, dict[str, Any]], int] | None = None


@dataclass(frozen=True)
class AxisChange:
    """One axis of one tensor whose size changes: its position, name, sizes."""

    dim: int
    axis: str
    source: int
    target: int


def axis_changes(named: Named, source: ArchSpec, target: ArchSpec,
                 skip: tuple[str, ...] = ()) -> list[AxisChange]:
    """The axes of `named` whose size differs between the two specs."""
    before, after = source.axis_sizes(), target.axis_sizes()
    return [AxisChange(dim, axis, before[axis], after[axis])
            for dim, axis in enumerate(named.axes)
            if axis in before and axis not in skip and before[axis] != after[axis]]


def as_compute(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor in float32 (a no-op for float32 input): methods compute in
    float32 and `lgcli.saving.save` writes the source's dtype."""
    return tensor.to(torch.float32)


def is_linear_weight(named: Named, role: str | None = None) -> bool:
    """A linear layer's (out, in) weight, possibly stacked over layers: its last
    axis is contracted with the input, which matters to methods that keep the
    function (clone divides along it). A lookup table (token or position
    embeddings, `stack.EMBEDDING_ROLES`) has the same axes but is no linear map.
    Fixed axes between the two are blocks of the input read side by side
    (DINOv2's classifier: (classes, 2, embed), the class token and the mean
    patch token; Swin's patch merging: (out, 4, stage_in), 4 neighbours of the
    previous stage's width): the last axis is still contracted with the input."""
    if role in EMBEDDING_ROLES:
        return False
    axes = named.axes[1:] if named.axes[0] == LAYER else named.axes
    return (len(axes) >= 2 and axes[0] in (EMBED, ATTN, KV, MLP, CLASSES, VOCAB)
            and axes[-1] in (EMBED, ATTN, KV, MLP, STAGE_IN) and all(axis == FIXED for axis in axes[1:-1]))


def per_role(stack: Stack, target: ArchSpec, compute: Callable[[str, Named, bool], torch.Tensor]) -> Stack:
    """The target-sized stack whose role r is ``compute(r, source role r,
    is_per_layer)``, made when asked (a RoleMap): a method states how one role
    is resized, and the writer pulls roles one at a time, so that only the
    role being made (and its source) is in memory. Every role's target shape
    follows from its axes (`stack.target_shape`) before anything is computed."""

    def lazy(roles: Mapping[str, Named], per_layer: bool) -> RoleMap:
        info = {}
        for role in roles:
            axes, shape = axes_and_shape(roles, role)
            info[role] = (axes, target_shape(axes, shape, target))
        return RoleMap(info, lambda role: compute(role, SourceRole(roles, role), per_layer))

    return Stack(layers=lazy(stack.layers, True), globals=lazy(stack.globals, False))


def copy_layers(stack: Stack, target: ArchSpec, plan: Sequence[int], zero_roles: Collection[str] = (),
                zeroed: Sequence[int] = ()) -> Stack:
    """The target stack whose layer i is the source's layer plan[i] (a
    depth-only method's whole rule: which source layer each target layer
    copies), the roles `zero_roles` set to zero in the layers `zeroed`
    (identity blocks), the globals kept. Only the layers named are read."""
    plan = [int(layer) for layer in plan]

    def copy(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        if not per_layer:
            return release(named)
        data = named.layers(plan)
        if role in zero_roles and zeroed:
            data[list(zeroed)] = 0
        return data

    return per_role(stack, target, copy)


def release(named: SourceRole) -> torch.Tensor:
    """The role's tensor, handed over: the SourceRole no longer holds it (the
    caller's stack is untouched). A role made by a lazy stack has no other
    holder, so a method that passes it straight on frees it as soon as its
    first step has made a new tensor (a level, a selection along one axis),
    not when the whole role is done: the peak is the source role and one
    intermediate, not two intermediates more."""
    data = named.data
    named.data = torch.empty(0)
    return data


def uniform_indices(source: int, target: int) -> torch.Tensor:
    """Weight selection's element indices (SPEC.md "Baselines", Xu et al. 2024):
    ``arange(s) * (T // s)`` when the source size T divides by the target size
    s, else ``round(linspace(0, T - 1, s))``. torch.round rounds halves to even
    (as numpy does): linspace(0, 5, 5) = [0, 1.25, 2.5, 3.75, 5] gives
    [0, 1, 2, 4, 5]."""
    if target > source:
        raise ValueError(f"cannot select {target} of {source} elements")
    if source % target == 0:
        return torch.arange(target) * (source // target)
    return torch.round(torch.linspace(0, source - 1, target, dtype=torch.float64)).long()


def select_along(tensor: torch.Tensor, changes: list[AxisChange],
                 indices_for: Callable[[AxisChange], torch.Tensor]) -> torch.Tensor:
    """Keep, along each changed axis, the elements `indices_for(change)` names.

    Evenly spaced indices (weight selection's whenever the sizes divide) are a
    strided view, and all the views are copied once at the end: one pass over
    the memory instead of one per axis (index_select along an inner axis is
    the slow part of a selection). Any other indices are gathered. The result
    never shares memory with `tensor` when something was selected."""
    original = tensor
    for change in changes:
        indices = indices_for(change)
        step = _even_step(indices)
        if step is None:
            tensor = index_along(tensor, change.dim, indices)
        else:
            start = int(indices[0])
            tensor = tensor.narrow(change.dim, start, tensor.shape[change.dim] - start)
            tensor = tensor[(slice(None),) * change.dim + (slice(None, step * (len(indices) - 1) + 1, step),)]
    if changes and tensor.untyped_storage().data_ptr() == original.untyped_storage().data_ptr():
        return tensor.contiguous() if not tensor.is_contiguous() else tensor.clone()
    return tensor


def _even_step(indices: torch.Tensor) -> int | None:
    """The common step of evenly spaced, increasing indices (None otherwise)."""
    if indices.numel() < 2:
        return 1 if indices.numel() == 1 else None
    steps = indices[1:] - indices[:-1]
    step = int(steps[0])
    return step if step > 0 and bool((steps == step).all()) else None


def embed_into(backdrop: torch.Tensor, values: torch.Tensor, changes: list[AxisChange],
               indices_for: Callable[[AxisChange], torch.Tensor]) -> torch.Tensor:
    """The inverse of `select_along`: a copy of `backdrop` (target-sized) with
    `values` written at the selected positions of every changed axis."""
    out = backdrop.clone()
    index: list[Any] = [slice(None)] * out.dim()
    broadcast = [i for i, _ in enumerate(index)]
    for change in changes:
        shape = [1] * out.dim()
        shape[change.dim] = -1
        index[change.dim] = indices_for(change).to(out.device).view(shape)
    if changes:
        # Unchanged axes need explicit aranges once advanced indexing is used.
        for dim in broadcast:
            if isinstance(index[dim], slice):
                shape = [1] * out.dim()
                shape[dim] = -1
                index[dim] = torch.arange(out.shape[dim], device=out.device).view(shape)
        out[tuple(index)] = values.to(out.device, out.dtype)
    else:
        out.copy_(values)
    return out
