"""One state-dict reader and writer for every family, driven by the family's
declaration.

A family is declared as data (`Layout`), as mergekit declares architectures:
the key of each per-layer tensor (``{prefix}{layers}.{layer_index}.{suffix}``)
and the canonical role it holds, the tensors that fuse several roles along
their output axis and those stored transposed, the global tensors with
their roles and axes. Which rows of a fused tensor are queries and which
keys/values follows from the roles' canonical axes (`attn` or `kv`). From
that alone this module sorts a state dict's keys, checks every tensor,
builds the lazy canonical `Stack` and writes a stack back to the same keys.

`DeclaredAdapter` is the reading and writing half of `base.FamilyAdapter`
for any declared family; a family gives it its `layout` and, in its own file,
only what the declaration cannot say: its configuration beyond the sizes
(`spec_from`), the heads a state dict cannot show, and its library.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ..errors import LgError, shown
from ..lazy import nn, torch
from ..stack import (ATTN, EMBED, KV, LAYER_ROLE_AXES, MLP, ArchSpec, RoleMap, Stack, TensorGroup, axes_and_shape,
                     copy_elements)
from .base import TEXT_ENCODER, AdapterDefaults, Reader, norm_facts

# A head count no file records is guessed as the ViT/BERT/GPT-2 convention:
# heads of dimension 64.
CONVENTIONAL_HEAD_DIM = 64


@dataclass(frozen=True)
class Layout:
    """A family's state dict, as data.

    Per-layer keys are ``{base_prefix}{layers}.{layer_index}.{suffix}``;
    `layer_keys` maps a suffix to its role, `fused_keys` a suffix to the
    roles stacked along its output axis (rows), `transposed` lists suffixes
    stored (in, out). `base_globals` (key -> (role, axes)) live under the
    base prefix, `head_globals` outside it (a text model's LM head);
    `grouped_inputs` maps a global key to the number of equal blocks its
    last axis holds side by side, which its role keeps apart as an axis of
    its own (DINOv2's classifier reads [class token, mean patch token]:
    stored (classes, 2·D), the role (classes, 2, D), whose last axis is the
    width);
    `ignored` matches buffers that older checkpoints carry and loading
    ignores. The base prefix is optional in a state dict (a text model's
    base class is saved without it). `size_fields` names the field of the
    family's configuration (timm's model_args, config.json) that holds each
    size: depth, width, heads, kv_heads, head_dim, mlp_dim, and a text
    model's vocab and positions. `post_norm`, `rms_norm`: as ArchSpec's."""

    family: str
    layers: str
    layer_keys: Mapping[str, str]
    base_globals: Mapping[str, tuple[str, tuple[str, ...]]]
    base_prefix: str = ""
    head_globals: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    fused_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    grouped_inputs: Mapping[str, int] = field(default_factory=dict)
    transposed: frozenset[str] = frozenset()
    ignored: tuple[str, ...] = ()
    size_fields: Mapping[str, str] = field(default_factory=dict)
    post_norm: bool = False
    rms_norm: bool = False

    @property
    def global_roles(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        return {**self.base_globals, **self.head_globals}

    def key(self, name: str, prefix: str) -> str:
        """A layer or global key as written: under `prefix`, but a head global's."""
        return name if name in self.head_globals else prefix + name

    def suffix_rank(self, suffix: str) -> int:
        """Dimensions of a per-layer tensor as stored (a fused one has its roles')."""
        role = self.fused_keys[suffix][0] if suffix in self.fused_keys else self.layer_keys[suffix]
        return len(LAYER_ROLE_AXES[role]) - 1

    def global_rank(self, key: str) -> int:
        """Dimensions of a global tensor as stored (a grouped one has one
        fewer than its role)."""
        return len(self.global_roles[key][1]) - (key in self.grouped_inputs)

    def global_role_shape(self, key: str, stored: tuple[int, ...]) -> tuple[int, ...]:
        """A global's role shape from its stored shape: a grouped last axis
        split into (blocks, block size). The elements keep their order."""
        if key not in self.grouped_inputs:
            return stored
        blocks = self.grouped_inputs[key]
        return (*stored[:-1], blocks, stored[-1] // blocks)

    def global_stored_shape(self, key: str, role: tuple[int, ...]) -> tuple[int, ...]:
        """The inverse of `global_role_shape`."""
        return (*role[:-2], role[-2] * role[-1]) if key in self.grouped_inputs else role


@dataclass
class StoredTensors:
    """A state dict sorted by a layout (only shapes and dtypes are looked at):
    `layers[i]` maps a suffix to layer i's tensor, `globals` a base global's
    key (without the prefix) to its tensor, `heads` a head global's."""

    prefix: str
    layers: list[dict[str, torch.Tensor]]
    globals: dict[str, torch.Tensor]
    heads: dict[str, torch.Tensor]

    @property
    def first(self) -> dict[str, torch.Tensor]:
        return self.layers[0]

    @property
    def depth(self) -> int:
        return len(self.layers)

    def stored_global(self, key: str) -> tuple[str, torch.Tensor | None]:
        """(the name in the file, the tensor) of a global key of the layout;
        (the key, None) when the state dict does not hold it."""
        if key in self.globals:
            return self.prefix + key, self.globals[key]
        return key, self.heads.get(key)


def sort_keys(layout: Layout, state_dict: Mapping[str, torch.Tensor],
              not_family: Callable[[str], str]) -> StoredTensors:
    """The state dict's tensors by layer and suffix, and its globals; an
    unknown key, or layer indices with a gap, are refused. Layer indices are
    ASCII digits without leading zeros: "blocks.00" and "blocks.١" (an
    Arabic-Indic one) are not layers 0 and 1 but unknown keys."""
    prefix = layout.base_prefix if layout.base_prefix and any(
        k.startswith(layout.base_prefix) for k in state_dict) else ""
    pattern = re.compile(rf"^{re.escape(prefix + layout.layers)}\.(0|[1-9][0-9]*)\.(.+)$", re.ASCII)
    ignored = [re.compile(p) for p in layout.ignored]
    known = {*layout.layer_keys, *layout.fused_keys}
    per_layer: dict[int, dict[str, torch.Tensor]] = {}
    stored = StoredTensors(prefix, [], {}, {})
    unknown: list[str] = []
    for key, value in state_dict.items():
        if any(p.search(key) for p in ignored):
            continue
        match = pattern.match(key)
        if match:
            if match.group(2) in known:
                per_layer.setdefault(int(match.group(1)), {})[match.group(2)] = value
            else:
                unknown.append(key)
        elif key.startswith(prefix) and key[len(prefix):] in layout.base_globals:
            stored.globals[key[len(prefix):]] = value
        elif key in layout.head_globals:
            stored.heads[key] = value
        else:
            unknown.append(key)
    if unknown:
        listed = ", ".join(shown(k) for k in sorted(unknown)[:3]) + (
            f" (+{len(unknown) - 3} more)" if len(unknown) > 3 else "")
        raise LgError(not_family(f"unexpected keys {listed}"))
    indices = sorted(per_layer)
    if indices != list(range(len(indices))):
        raise LgError(not_family(f"layer indices are not 0..{len(indices) - 1} (found {indices[:6]})"))
    if not indices:
        raise LgError(not_family(f"no layers ({prefix}{layout.layers}.N.*)"))
    stored.layers = [per_layer[i] for i in indices]
    return stored


def check_tensors(layout: Layout, stored: StoredTensors, not_family: Callable[[str], str]) -> None:
    """Every layer has layer 0's tensors, shapes and dtypes; every tensor its
    role's rank, a floating-point dtype and at least one value."""
    first = stored.first
    for index, layer in enumerate(stored.layers):
        if set(layer) != set(first):
            diff = sorted(set(layer) ^ set(first))
            raise LgError(not_family(f"layer {index} has different parameters from layer 0 ({diff[0]})"))
        for key, tensor in layer.items():
            if tensor.shape != first[key].shape or tensor.dtype != first[key].dtype:
                raise LgError(not_family(f"layer {index}'s {key} is {tuple(tensor.shape)} "
                                         f"{str(tensor.dtype).replace('torch.', '')}, layer 0's is "
                                         f"{tuple(first[key].shape)} {str(first[key].dtype).replace('torch.', '')}"))
    named = [(f"{stored.prefix}{layout.layers}.0.{suffix}", t, layout.suffix_rank(suffix)) for suffix, t in first.items()]
    named += [(stored.stored_global(key)[0], t, layout.global_rank(key))
              for key, t in [*stored.globals.items(), *stored.heads.items()]]
    for key, tensor in [*stored.globals.items(), *stored.heads.items()]:
        blocks = layout.grouped_inputs.get(key)
        if blocks and tensor.dim() == layout.global_rank(key) and tensor.shape[-1] % blocks:
            raise LgError(not_family(f"{stored.stored_global(key)[0]} has shape {tuple(tensor.shape)}, whose last "
                                     f"axis is not {blocks} equal blocks"))
    for name, tensor, rank in named:
        if tensor.dim() != rank:
            raise LgError(not_family(f"{name} has shape {tuple(tensor.shape)}, expected {rank} dimensions"))
        if not tensor.is_floating_point():
            raise LgError(not_family(f"{name} has dtype {str(tensor.dtype).replace('torch.', '')}; "
                                     f"weights are floating point"))
        if tensor.numel() == 0:  # a head of 0 classes, a position table of 0 tokens: no library builds them
            raise LgError(not_family(f"{name} has shape {tuple(tensor.shape)}, which holds nothing; every "
                                     f"tensor holds at least one value (a model without a head has no head tensors)"))


def canonical_shapes(layout: Layout, layer: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Each per-layer tensor's shape in PyTorch's (out, in) layout."""
    shapes = {}
    for suffix, tensor in layer.items():
        shape = tuple(tensor.shape)
        shapes[suffix] = (shape[1], shape[0]) if suffix in layout.transposed and len(shape) == 2 else shape
    return shapes


def query_rows(layout: Layout, shapes: Mapping[str, tuple[int, ...]], not_family: Callable[[str], str]) -> int:
    """Outputs of the query projection (a fused q|k|v without grouping: a third)."""
    for suffix, role in layout.layer_keys.items():
        if role == "q" and suffix in shapes:
            return shapes[suffix][0]
    for suffix, roles in layout.fused_keys.items():
        if roles[0] == "q" and suffix in shapes:
            return shapes[suffix][0] // len(roles)
    raise LgError(not_family("no query projection"))


def key_value_rows(layout: Layout, shapes: Mapping[str, tuple[int, ...]], q_rows: int) -> int:
    """Outputs of the key projection: as many as the queries' unless stored apart."""
    for suffix, role in layout.layer_keys.items():
        if role == "k" and suffix in shapes:
            return shapes[suffix][0]
    return q_rows


def heads_given(q_rows: int, kv_rows: int, heads: int | None, kv_heads: int | None) -> int | None:
    """The query heads the caller gives: `heads`, or those `kv_heads` key/value
    heads imply (their dimension, kv_rows / kv_heads, is every head's)."""
    if kv_heads is None:
        return heads
    if kv_heads < 1 or kv_rows % kv_heads or q_rows % (kv_rows // kv_heads):
        raise LgError(f"--source-kv-heads {kv_heads} does not split the weights' {kv_rows} key outputs into heads "
                      f"whose dimension divides the {q_rows} query outputs")
    implied = q_rows // (kv_rows // kv_heads)
    if heads is not None and heads != implied:
        raise LgError(f"--source-heads {heads} and --source-kv-heads {kv_heads} disagree: {kv_heads} key/value heads "
                      f"of the weights make heads of dimension {kv_rows // kv_heads}, so {implied} query heads")
    return implied


def conventional_heads(q_rows: int, kv_rows: int) -> int:
    """The head count of dimension nearest 64 that divides the query outputs
    into whole heads (and the key/value outputs into whole heads of that
    dimension); the larger count on a tie."""
    target = q_rows / CONVENTIONAL_HEAD_DIM
    divisors = [h for h in range(1, q_rows + 1) if q_rows % h == 0 and kv_rows % (q_rows // h) == 0]
    return min(divisors, key=lambda h: (abs(h - target), -h))


def role_sources(layout: Layout, shapes: Mapping[str, tuple[int, ...]], attn_dim: int, kv_dim: int,
                 not_family: Callable[[str], str]) -> dict[str, tuple[str, int, tuple[int, ...]]]:
    """role -> (suffix, the role's first row in that tensor, the role's
    per-layer (out, in) shape). A fused tensor's rows are its roles' in
    order, `attn_dim` rows for a role over the attention heads (queries),
    `kv_dim` for one over the key/value heads, and the rest shared equally
    by the roles over the MLP (SwiGLU's gate|up)."""
    sources: dict[str, tuple[str, int, tuple[int, ...]]] = {}
    for suffix, roles in layout.fused_keys.items():
        if suffix not in shapes:
            continue
        shape = shapes[suffix]
        known = {ATTN: attn_dim, KV: kv_dim}
        axes = [LAYER_ROLE_AXES[role][1] for role in roles]
        shared = axes.count(MLP)
        fixed = sum(known.get(axis, 0) for axis in axes)
        rest = shape[0] - fixed
        if not shared and rest:
            raise LgError(not_family(f"{suffix} has {shape[0]} outputs; the attention ({attn_dim}) and "
                                     f"key/value ({kv_dim}) widths need {fixed}"))
        if shared and (rest <= 0 or rest % shared):
            raise LgError(not_family(f"{suffix} has {shape[0]} outputs, which are not {shared} equal MLP parts"))
        start = 0
        for role, axis in zip(roles, axes):
            rows = known.get(axis, rest // shared if shared else 0)
            sources[role] = (suffix, start, (rows, *shape[1:]))
            start += rows
    for suffix, shape in shapes.items():
        if suffix not in layout.fused_keys:
            sources[layout.layer_keys[suffix]] = (suffix, 0, shape)
    return sources


def compute_dtype(stored: torch.dtype) -> torch.dtype:
    """The dtype a role is read into: float32 for half precisions (bf16,
    fp16, fp8), so that methods compute in float32; wider ones as stored.
    The writer casts back to the file's dtype."""
    return torch.float32 if stored.is_floating_point and stored.itemsize < 4 else stored


def memory_reader(state_dict: Mapping[str, torch.Tensor]) -> Reader:
    """A reader of tensors held in memory, as a file's are read."""
    return lambda key, out, start: copy_elements(state_dict[key], out, start)


def lazy_stack(layout: Layout, stored: StoredTensors, sources: Mapping[str, tuple[str, int, tuple[int, ...]]],
               read: Reader) -> Stack:
    """The canonical stack, each role read (with `read`) when asked for,
    layer by layer into its stacked tensor, and not kept."""
    first, depth = stored.first, stored.depth

    def make_layers(role: str, indices: list[int] | None = None) -> torch.Tensor:
        suffix, row, shape = sources[role]
        tensor = first[suffix]
        chosen = range(depth) if indices is None else indices
        out = torch.empty((len(chosen), *shape), dtype=compute_dtype(tensor.dtype), device=tensor.device)
        # Stored (in, out) (GPT-2's Conv1D): the role is some columns of the
        # layer's tensor, so the layer is read whole and transposed. Otherwise
        # the role's rows are one contiguous range, read straight into the
        # stack, or through a buffer when widened to float32: the role is never
        # held in both precisions.
        whole = suffix in layout.transposed
        start = row * math.prod(shape[1:])
        buffer = None
        if whole or out.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape if whole else shape, dtype=tensor.dtype, device=tensor.device)
        for position, index in enumerate(chosen):
            if not 0 <= index < depth:
                raise IndexError(f"layer {index} of a {depth}-layer stack")
            key = f"{stored.prefix}{layout.layers}.{index}.{suffix}"
            if buffer is None:
                read(key, out[position], start)
            elif whole:
                read(key, buffer, 0)
                out[position].copy_(buffer[:, row:row + shape[0]].T)
            else:
                read(key, buffer, start)
                out[position].copy_(buffer)
        return out

    global_roles = layout.global_roles
    key_of_role = {global_roles[key][0]: key for key in [*stored.globals, *stored.heads]}

    def make_global(role: str) -> torch.Tensor:
        key = key_of_role[role]
        name, tensor = stored.stored_global(key)
        # A grouped global is read flat into its role's shape: the same elements in the same order.
        out = torch.empty(layout.global_role_shape(key, tuple(tensor.shape)), dtype=tensor.dtype, device=tensor.device)
        read(name, out, 0)
        return out.to(compute_dtype(tensor.dtype))

    layers = RoleMap({role: (LAYER_ROLE_AXES[role], (depth, *shape)) for role, (_, _, shape) in sources.items()},
                     make_layers, make_layers)
    globals_ = RoleMap({role: (global_roles[key][1],
                               layout.global_role_shape(key, tuple(stored.stored_global(key)[1].shape)))
                        for role, key in key_of_role.items()}, make_global)
    return Stack(layers=layers, globals=globals_)


def write_plan(layout: Layout, spec: ArchSpec, stack: Stack, prefix: str) -> list[TensorGroup]:
    """The state dict as groups written one at a time: the globals, each fused
    tensor's roles together (made together, layer by layer), then every other
    role over all layers. Names and shapes come first, from the stack's
    shapes alone; `prefix` goes before every key but the head globals'."""
    stack.check(spec)

    def key(name: str) -> str:
        return layout.key(name, prefix)

    groups = []
    for name, (role, _) in layout.global_roles.items():
        if role in stack.globals:
            stored = layout.global_stored_shape(name, axes_and_shape(stack.globals, role)[1])
            groups.append(TensorGroup([(key(name), stored)], lambda name=name, role=role, stored=stored: iter(
                [(key(name), stack.globals[role].data.reshape(stored))])))
    layers = stack.layers

    def per_layer(suffix: str, roles: tuple[str, ...]) -> TensorGroup:
        shapes = [axes_and_shape(layers, role)[1][1:] for role in roles]
        shape = (sum(s[0] for s in shapes), *shapes[0][1:])
        transposed = suffix in layout.transposed and len(shape) == 2
        stored = (shape[1], shape[0]) if transposed else shape
        names = [key(f"{layout.layers}.{i}.{suffix}") for i in range(spec.depth)]

        def make() -> Iterator[tuple[str, torch.Tensor]]:
            parts = [layers[role].data for role in roles]
            for index, name in enumerate(names):
                tensor = parts[0][index] if len(parts) == 1 else torch.cat([p[index] for p in parts])
                yield name, (tensor.T.contiguous() if transposed else tensor)

        return TensorGroup([(name, stored) for name in names], make)

    for suffix, roles in layout.fused_keys.items():
        if roles[0] in layers:
            groups.append(per_layer(suffix, roles))
    for suffix, role in layout.layer_keys.items():
        if role in layers:
            groups.append(per_layer(suffix, (role,)))
    return groups


@dataclass(frozen=True)
class Heads:
    """The attention's shape: query heads, their dimension, key/value heads,
    and whether the count was assumed (no file or flag gave it)."""

    heads: int
    head_dim: int
    kv_heads: int
    assumed: bool = False


class DeclaredAdapter(AdapterDefaults):
    """Reading and writing for a family declared by its `layout`: the state
    dict members of `base.FamilyAdapter`. A family that is its declaration
    alone needs nothing more; the hooks (`checked_config`, `check_required`,
    `heads`, `exact_heads`, `spec_from`, `check_agreement`, `write_prefix`)
    are where a family says what its declaration cannot."""

    layout: Layout
    heads_may_go_unrecorded = False  # `base.FamilyAdapter`

    def scored_by_lg(self, spec: ArchSpec) -> bool:  # `base.FamilyAdapter`: a headless text encoder is not
        return self.task(spec) != TEXT_ENCODER

    @property
    def family(self) -> str:
        return self.layout.family

    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        """Whether layer 0 holds the first declared per-layer tensor."""
        marker = f"{self.layout.layers}.0."
        first = next(iter(self.layout.layer_keys))
        return any(k in state_dict for k in (f"{marker}{first}", f"{self.layout.base_prefix}{marker}{first}"))

    # ------------------------------------------------------------ reading
    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None,
                 kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        """Split a state dict into (spec, canonical stack).

        With a `reader` (a Checkpoint's `read_into`), the stack is lazy: a
        role is read from the file when asked for, and nothing is kept (only
        shapes and dtypes of `state_dict` are looked at here). Without one,
        every role is made at once, by the same code, from the tensors in
        `state_dict`. A recorded `config` is checked, and against the
        tensors: one that disagrees with them is refused naming what."""
        layout = self.layout
        config = self.checked_config(config)
        stored = sort_keys(layout, state_dict, self.not_family)
        check_tensors(layout, stored, self.not_family)
        self.check_required(stored)
        shapes = canonical_shapes(layout, stored.first)
        q_rows = query_rows(layout, shapes, self.not_family)
        kv_rows = key_value_rows(layout, shapes, q_rows)
        attention = self.heads(config, stored, q_rows, kv_rows, heads_given(q_rows, kv_rows, heads, kv_heads))
        sources = role_sources(layout, shapes, attention.heads * attention.head_dim,
                               attention.kv_heads * attention.head_dim, self.not_family)
        read = reader or memory_reader(state_dict)
        spec, stored = self.spec_from(config, stored, sources, attention, read)
        stack = lazy_stack(layout, stored, sources, read)
        return checked_reading(self, config, spec, stack, lazy=reader is not None)

    def not_family(self, found: str) -> str:
        """A refusal of a state dict that is not this family's."""
        return f"not a {self.family} checkpoint lg reads: {found}"

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """The recorded configuration, checked (empty when there is none)."""
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise LgError(f"a model's config must be a JSON object, found {type(config).__name__}")
        return dict(config)

    def check_required(self, stored: StoredTensors) -> None:
        """Refuse a state dict that lacks a tensor the family cannot do without."""

    def heads(self, config: Mapping[str, Any], stored: StoredTensors, q_rows: int, kv_rows: int,
              requested: int | None) -> Heads:
        """The attention's heads: as the recorded configuration says, else
        the caller, else the tensors (`exact_heads`), else of dimension 64
        (and said to be assumed)."""
        field_name = self.layout.size_fields.get("heads")
        recorded = config.get(field_name) if field_name else None
        if recorded is not None and requested is not None and recorded != requested:
            # The flag has another name per command (--heads, --source-heads,
            # --teacher-heads): the message names the value, not a flag.
            raise LgError(f"the file's metadata says {recorded} heads; the {requested} heads given contradict it")
        chosen = recorded if recorded is not None else requested
        if chosen is None:
            chosen = self.exact_heads(stored, q_rows)
        assumed = chosen is None
        if chosen is None:
            chosen = conventional_heads(q_rows, kv_rows)
        chosen = int(chosen)
        if chosen <= 0 or q_rows % chosen or kv_rows % (q_rows // chosen):
            raise LgError(f"{chosen} heads do not divide the attention width {q_rows}")
        head_dim = q_rows // chosen
        return Heads(chosen, head_dim, kv_rows // head_dim, assumed)

    def exact_heads(self, stored: StoredTensors, q_rows: int) -> int | None:
        """The head count the tensors show, when some tensor is per head."""
        return None

    def spec_from(self, config: Mapping[str, Any], stored: StoredTensors,
                  sources: Mapping[str, tuple[str, int, tuple[int, ...]]], attention: Heads,
                  read: Reader) -> tuple[ArchSpec, StoredTensors]:
        """(the spec, the stored tensors that are roles of their own): the
        sizes the roles' axes show, and what a family adds (its own
        configuration in `extras`, a tied head's copy read past)."""
        def size(axis: str) -> int:
            return next((shape[LAYER_ROLE_AXES[role].index(axis) - 1] for role, (_, _, shape) in sources.items()
                         if axis in LAYER_ROLE_AXES[role]), 0)

        return ArchSpec(family=self.family, depth=stored.depth, width=size(EMBED), heads=attention.heads,
                        head_dim=attention.head_dim, mlp_dim=size(MLP), heads_assumed=attention.assumed,
                        kv_heads=attention.kv_heads, **norm_facts(self.layout, stored.globals)), stored

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        """Refuse a recorded configuration that says other than the tensors."""

    # ------------------------------------------------------------ writing
    def folder_config(self, spec: ArchSpec) -> dict[str, Any] | None:
        """The config.json of the model folder `spec` is written as, or None
        when it is written as one file: a Hugging Face family's folder records
        its configuration as lg.config does."""
        return self.config(spec) if getattr(self, "writes_folder", False) else None

    def write_prefix(self, spec: ArchSpec) -> str:
        """What goes before every key written but the head globals'."""
        return self.layout.base_prefix

    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        """The family's state dict for (spec, stack), as groups the writer
        streams one at a time: the inverse of `to_stack`."""
        return write_plan(self.layout, spec, stack, self.write_prefix(spec))

    def from_stack(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        """The whole state dict, in memory."""
        return {name: tensor for group in self.write_plan(spec, stack) for name, tensor in group.make()}

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        return self.from_stack(spec, stack)  # nothing tied

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        return {}  # nothing computed when the model is built

    def saved_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return {name: tensor.detach() for name, tensor in model.state_dict().items()}

    def global_role_axes(self) -> dict[str, tuple[str, ...]]:
        """Every global role this family can have, with its axes."""
        return {role: axes for role, axes in self.layout.global_roles.values()}

    def layer_modules(self, spec: ArchSpec, model: nn.Module) -> dict[str, list[str]]:
        """Where the calibration pass looks inside `model`, the family's model
        of `spec` (`load_model`), one module name per block: each block
        ("block"), its attention's output projection ("o"), its MLP's down
        projection ("fc2") and its two norms ("norm1", "norm2"). They follow
        from the declaration: the module that holds a role's weight, by the
        key the declaration names for it as the library's model calls it
        (`live_keys`), of the declared keys for the role the one this model
        has (DINOv2's down projection is mlp.fc2 or, SwiGLU, mlp.weights_out)."""
        base = f"{self.write_prefix(spec)}{self.layout.layers}"
        parameters = {name for name, _ in model.named_parameters()}
        modules: dict[str, list[str]] = {}
        for name, role in (("o", "o"), ("fc2", "fc2"), ("norm1", "norm1_weight"), ("norm2", "norm2_weight")):
            for suffix, declared in self.layout.layer_keys.items():
                if declared != role:
                    continue
                keys = self.live_keys(model, [f"{base}.{i}.{suffix}" for i in range(spec.depth)])
                if all(key in parameters for key in keys):
                    modules[name] = [key.rsplit(".", 1)[0] for key in keys]
                    break
        if "o" in modules:  # a block is the module of its layer index, as the model names it
            modules["block"] = [_block_of(module, index) for index, module in enumerate(modules["o"])]
        return modules

    def live_keys(self, model: nn.Module, keys: list[str]) -> list[str]:
        """The names `model` gives the parameters stored under `keys` (the
        same, unless its library renames keys when it loads them)."""
        return keys


def _block_of(module: str, index: int) -> str:
    """The block of a module inside block `index`: its name up to the index
    (``model.layers.3.self_attn.o_proj`` -> ``model.layers.3``)."""
    parts = module.split(".")
    at = max(i for i, part in enumerate(parts) if part == str(index))
    return ".".join(parts[:at + 1])


def checked_reading(adapter: Any, config: Mapping[str, Any], spec: ArchSpec, stack: Stack, *,
                    lazy: bool) -> tuple[ArchSpec, Stack]:
    """The last step of every reader (a declared family's, a model of
    stages'): the stack checked against its spec and the recorded config,
    then kept lazy (roles read when asked) or read now."""
    try:
        stack.check(spec)
    except ValueError as exc:
        raise LgError(adapter.not_family(str(exc))) from None
    adapter.check_agreement(config, spec, stack)
    return spec, (stack if lazy else stack.materialized())
