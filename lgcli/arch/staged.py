"""What every model of stages shares (a Swin, in timm's form, timm_staged.py's
adapter of swin.py's declaration, and in transformers', hf_swin.py): no family
of its own.

A model of stages (`stack.ArchSpec.stages`) is a sequence of canonical
Stacks, each of its own depth, width, heads and MLP, each declared as data
(a family's `stage_layout(index, count)`: its blocks, and the globals on its
width) and read and written by `declared` (`StageAdapter`). Between two
stages sits a patch merging (a LayerNorm over 4C and a Linear 4C -> 2C, C
the width of the stage before), which belongs to the stage after it, seen
as (out = embed, 4 neighbours, stage_in = C): a method resizes each block of
C by its own width rule, so the 2 x 2 neighbourhood stays whole.

A family module imports this one; this one imports no family module
(tests/test_arch_imports.py).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import LgError, UsageError
from ..lazy import torch
from ..stack import EMBED, FIXED, STAGE_IN, ArchSpec, RoleMap, Stack, TensorGroup, axes_and_shape
from .base import AdapterDefaults, Reader
from .declared import DeclaredAdapter, Layout, StoredTensors, checked_reading, compute_dtype, memory_reader
from .shapes import LayerShapes, ModelShapes

# Neighbours a patch merging concatenates (a 2 x 2 patch of the stage before).
MERGED = 4
# The patch merging before stage i >= 1 (its suffix after the stage's root,
# the same in timm and transformers), in its canonical shape: the 4C axis as
# (4 neighbours, C).
MERGE_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "downsample.norm.weight": ("merge_norm_weight", (FIXED, STAGE_IN)),
    "downsample.norm.bias": ("merge_norm_bias", (FIXED, STAGE_IN)),
    "downsample.reduction.weight": ("merge_weight", (EMBED, FIXED, STAGE_IN)),
}




class StageAdapter(DeclaredAdapter):
    """One stage of a Swin (any form) read and written by `declared`: its
    blocks and the plain globals on its width, under `prefix`; the heads
    are exact, from the position tables."""

    def __init__(self, layout: Layout, not_family, prefix: str = "") -> None:
        self.layout, self._not_family, self._prefix = layout, not_family, prefix
        self._table = next(k for k, role in layout.layer_keys.items() if role == "rel_pos_bias")

    def not_family(self, found: str) -> str:
        return self._not_family(found)

    def write_prefix(self, spec: ArchSpec) -> str:
        return self._prefix

    def check_required(self, stored: StoredTensors) -> None:
        roles = {self.layout.layer_keys.get(suffix) for suffix in stored.first}
        roles |= {role for suffix, fused in self.layout.fused_keys.items() if suffix in stored.first for role in fused}
        for role in ("q", "o", "fc1", "rel_pos_bias"):
            if role not in roles:
                suffix = next(k for k, r in [*self.layout.layer_keys.items(),
                                             *((k, f[0]) for k, f in self.layout.fused_keys.items())] if r == role)
                raise LgError(self._not_family(f"{stored.prefix}{self.layout.layers}.0 lacks {suffix}"))

    def exact_heads(self, stored: StoredTensors, q_rows: int) -> int | None:
        return int(stored.first[self._table].shape[1])


def _joined(first: RoleMap, second: RoleMap) -> RoleMap:
    """Two lazy role maps as one."""
    info = {role: axes_and_shape(roles, role) for roles in (first, second) for role in roles}
    return RoleMap(info, lambda role: (first if role in first else second)[role].data)


def _merge_roles(stage: str, keys: Mapping[str, str], stored: Mapping[str, torch.Tensor], width: int,
                 previous: int, read: Reader, not_family) -> RoleMap:
    """The patch merging before `stage`, lazy, in its canonical shapes (the
    4C axis as 4 neighbours of C: timm and transformers both concatenate the
    2 x 2 patch's features neighbour by neighbour, in the same order (row
    offset fastest: (0, 0), (1, 0), (0, 1), (1, 1)), so each block of C is
    one neighbour). `keys` maps a MERGE_KEYS suffix to its key in the file."""
    expected = {"downsample.norm.weight": (MERGED * previous,), "downsample.norm.bias": (MERGED * previous,),
                "downsample.reduction.weight": (width, MERGED * previous)}
    for suffix, shape in expected.items():
        tensor = stored.get(suffix)
        if tensor is None:
            raise LgError(not_family(f"{stage} has no {keys[suffix]}"))
        if tuple(tensor.shape) != shape or not tensor.is_floating_point():
            raise LgError(not_family(f"{keys[suffix]} is {tuple(tensor.shape)} {tensor.dtype}; "
                                     f"a merging of width {previous} into {width} is {shape} floating point"))
    info = {role: (axes, (*expected[suffix][:-1], MERGED, previous)) for suffix, (role, axes) in MERGE_KEYS.items()}
    suffix_of = {role: suffix for suffix, (role, _) in MERGE_KEYS.items()}

    def make(role: str) -> torch.Tensor:
        tensor = stored[suffix_of[role]]
        out = torch.empty(info[role][1], dtype=tensor.dtype, device=tensor.device)
        read(keys[suffix_of[role]], out, 0)  # same elements, in the same order
        return out.to(compute_dtype(tensor.dtype))

    return RoleMap(info, make)


def _block_role_shapes(stage: ArchSpec, window: int, qkv_bias: bool) -> dict[str, tuple[int, ...]]:
    """One block's roles in a stage of `stage`'s sizes, at its `window`."""
    width, attn, mlp = stage.width, stage.attn_dim, stage.mlp_dim
    shapes = {"norm1_weight": (width,), "norm1_bias": (width,), "q": (attn, width), "k": (attn, width),
              "v": (attn, width), "rel_pos_bias": ((2 * window - 1) ** 2, stage.heads), "o": (width, attn),
              "o_bias": (width,), "norm2_weight": (width,), "norm2_bias": (width,), "fc1": (mlp, width),
              "fc1_bias": (mlp,), "fc2": (width, mlp), "fc2_bias": (width,)}
    if qkv_bias:
        shapes.update(q_bias=(attn,), k_bias=(attn,), v_bias=(attn,))
    return shapes


def _stored_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A merging tensor's shape in the file: (4, C) -> 4C."""
    return (*shape[:-2], shape[-2] * shape[-1])


class StagedAdapter(AdapterDefaults):
    """What every form of a Swin shares (timm's, `timm_staged.StagedTimmAdapter`; transformers',
    hf_swin.py): the stages read and written by `declared` (`StageAdapter`),
    the patch merging between them, and the sizes. A form gives its stage
    layouts, where its stages' keys sit, and its own configuration:

    - `stage_layout(index, count)`, the `declared.Layout` of a stage;
    - `stage_root`: stage i's keys are ``{prefix}{stage_root}.{i}.*``;
    - `merge_offset`: the merging under ``{stage_root}.{i}.downsample`` is
      the one before stage i + merge_offset (timm: 0, at the start of a
      stage; transformers: 1, at the end of the stage before);
    - `key_prefix` (the base model's prefix the state dict uses), `write_prefix` (the one it is written with),
      `checked_config`, `stage_extras`, `check_agreement`, `windows`,
      `misplaced_merge`, `not_family`, `create_model` (for `model_buffers`)."""

    family: str
    heads_may_go_unrecorded = False  # the heads are read from the position tables: never assumed
    bot_wavelets: dict[str, str] = {}
    stage_root: str
    merge_offset: int

    # ------------------------------------------------------------ reading
    def key_prefix(self, state_dict: Mapping[str, torch.Tensor]) -> str:
        return ""

    def merge_key(self, index: int, suffix: str) -> str:
        """The key (less the prefix) of a MERGE_KEYS suffix of the merging before stage `index`."""
        return f"{self.stage_root}.{index - self.merge_offset}.{suffix}"

    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None,
                 kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        """(spec with stages, stack with stages); lazy when given a `reader`.
        `heads` and `kv_heads` are not used: a Swin's heads are read from its
        position tables, and it has no grouped-query attention."""
        config = self.checked_config(config)
        if heads is not None:  # flags that do not apply: usage mistakes
            raise UsageError("a Swin's heads are read from its relative position tables: a flag giving them "
                             "(--source-heads, --heads) does not apply")
        if kv_heads is not None:
            raise UsageError("a Swin has no grouped-query attention: --source-kv-heads does not apply")
        prefix = self.key_prefix(state_dict)
        parts, merges = self._split_stages(state_dict, prefix)
        read = reader or memory_reader(state_dict)
        specs: list[ArchSpec] = []
        stacks: list[Stack] = []
        for index, part in enumerate(parts):
            layout = self.stage_layout(index, len(parts))
            spec, stack = StageAdapter(layout, self.not_family).to_stack(part, reader=read)
            if index:
                spec = spec.with_sizes(stage_input=specs[-1].width)
                keys = {suffix: prefix + self.merge_key(index, suffix) for suffix in MERGE_KEYS}
                merged = _merge_roles(f"stage {index}", keys, merges[index], spec.width, specs[-1].width, read,
                                      self.not_family)
                stack = Stack(layers=stack.layers, globals=_joined(stack.globals, merged))
            if spec.attn_dim != spec.width:
                raise LgError(self.not_family(f"stage {index}'s attention is {spec.attn_dim} wide, its width "
                                              f"{spec.width}"))
            specs.append(spec)
            stacks.append(stack)
        for index, spec in enumerate(specs[1:], 1):
            if spec.width != 2 * specs[index - 1].width:
                raise LgError(self.not_family(f"stage {index} is {spec.width} wide, stage {index - 1} "
                                              f"{specs[index - 1].width}: a Swin doubles the width per stage"))
        ratio = specs[0].mlp_dim / specs[0].width
        if any(int(spec.width * ratio) != spec.mlp_dim for spec in specs):
            raise LgError(self.not_family(f"the stages' MLPs ({', '.join(str(s.mlp_dim) for s in specs)}) have no "
                                          f"one ratio to their widths"))
        spec = ArchSpec.of_stages(self.family, tuple(specs), self.stage_extras(state_dict, prefix, specs, config))
        stack = Stack(stages=tuple(stacks))
        return checked_reading(self, config, spec, stack, lazy=reader is not None)

    def _split_stages(self, state_dict: Mapping[str, torch.Tensor],
                      prefix: str) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]]]:
        """The state dict by stage: each stage's blocks and the globals on its
        width (for `declared`), and the patch merging before it (by MERGE_KEYS suffix)."""
        pattern = re.compile(rf"^{re.escape(prefix + self.stage_root)}\.(0|[1-9][0-9]*)\.(.+)$", re.ASCII)
        indices = sorted({int(m.group(1)) for m in map(pattern.match, state_dict) if m})
        if indices != list(range(len(indices))) or not indices:
            raise LgError(self.not_family(f"stage indices are not 0..{len(indices) - 1} (found {indices[:6]})"))
        count = len(indices)
        last = self.stage_layout(count - 1, count)
        last_keys = {last.key(key, prefix) for key in last.global_roles} - {
            self.stage_layout(0, count).key(key, prefix) for key in self.stage_layout(0, count).global_roles}
        parts: list[dict[str, torch.Tensor]] = [{} for _ in indices]
        merges: list[dict[str, torch.Tensor]] = [{} for _ in indices]
        for key, tensor in state_dict.items():
            match = pattern.match(key)
            if match and match.group(2) in MERGE_KEYS:
                owner = int(match.group(1)) + self.merge_offset
                if not 0 < owner < count:
                    raise LgError(self.misplaced_merge(int(match.group(1))))
                merges[owner][match.group(2)] = tensor
            elif match:
                parts[int(match.group(1))][key] = tensor  # `declared` refuses what no block has
            elif key in last_keys:
                parts[-1][key] = tensor
            else:
                parts[0][key] = tensor  # the patch embedding; `declared` refuses anything else
        return parts, merges

    def stage_layer_modules(self, spec: ArchSpec, model: Any) -> list[dict[str, list[str]]]:
        """Where the calibration pass looks inside `model` (the form's own
        model of `spec`), stage by stage: each stage's `layer_modules` as a
        declared family gives them ("block", "o", "fc2", "norm1", "norm2",
        one name per block of the stage), from the stage's layout, so a
        data-aware method measures each stage's blocks on their own
        (`lgcli.calibration`)."""
        prefix, count = self.write_prefix(spec), len(spec.stages)
        modules = []
        for index, stage_spec in enumerate(spec.stages):
            stage = StageAdapter(self.stage_layout(index, count), self.not_family, prefix)
            renamed = getattr(self, "live_keys", None)  # the library's own names (transformers may rename)
            if renamed is not None:
                stage.live_keys = renamed
            modules.append(stage.layer_modules(stage_spec, model))
        return modules

    # ------------------------------------------------------------ writing
    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        """Each stage's blocks and globals as `declared` writes them, and the
        patch merging before it in the form's shapes (4C, not (4, C))."""
        stack.check(spec)
        prefix = self.write_prefix(spec)
        groups: list[TensorGroup] = []
        count = len(spec.stages)
        for index, (stage_spec, stage) in enumerate(zip(spec.stages, stack.stages)):
            groups += StageAdapter(self.stage_layout(index, count), self.not_family,
                                   prefix).write_plan(stage_spec, stage)
            if not index:
                continue
            for suffix, (role, _) in MERGE_KEYS.items():
                key = prefix + self.merge_key(index, suffix)
                shape = _stored_shape(axes_and_shape(stage.globals, role)[1])
                groups.append(TensorGroup([(key, shape)], lambda key=key, shape=shape, stage=stage, role=role:
                                          iter([(key, stage.globals[role].data.reshape(shape))])))
        return groups

    def from_stack(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        return {name: tensor for group in self.write_plan(spec, stack) for name, tensor in group.make()}

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        """The position indices and attention masks the library computes
        (not saved): from the model of `spec` built on the CPU (the masks are
        per block, so the whole model; a learngene's generated model asks once
        per depth it trains at)."""
        with torch.device("cpu"):
            model = self.create_model(spec)
        saved = set(model.state_dict())
        return {name: buffer.detach() for name, buffer in model.named_buffers() if name not in saved}

    def global_role_axes(self) -> dict[str, tuple[str, ...]]:
        """Every global role a model of stages can have: those of its first
        and last stages' layouts (the patch embedding; the final norm and the
        head), and the patch merging's."""
        layouts = [self.stage_layout(0, 2), self.stage_layout(1, 2)]
        return {role: axes for role, axes in
                [*(value for layout in layouts for value in layout.global_roles.values()), *MERGE_KEYS.values()]}

    # ------------------------------------------------------------ sizes
    def model_shapes(self, spec: ArchSpec) -> ModelShapes:
        """The state dict of a model of `spec`, as shapes, from its sizes
        alone (nothing is built): each stage's blocks and globals under the
        names its layout gives each role, and the patch merging before it."""
        e, prefix, count = spec.extras, self.write_prefix(spec), len(spec.stages)
        first, last, patch, classes = spec.stages[0].width, spec.stages[-1].width, int(e["patch_size"]), int(
            e["num_classes"])
        global_roles = {"patch_embed_weight": (first, int(e["in_chans"]), patch, patch), "patch_embed_bias": (first,),
                        "patch_norm_weight": (first,), "patch_norm_bias": (first,), "norm_weight": (last,),
                        "norm_bias": (last,), **({"head_weight": (classes, last), "head_bias": (classes,)}
                                                 if classes else {})}
        layers, globals_ = [], {}
        for index, (stage, window) in enumerate(zip(spec.stages, self.windows(spec))):
            layout = self.stage_layout(index, count)
            roles = _block_role_shapes(stage, window, bool(e["qkv_bias"]))
            layer = {suffix: roles[role] for suffix, role in layout.layer_keys.items() if role in roles}
            layer.update({suffix: (sum(roles[role][0] for role in fused), *roles[fused[0]][1:])
                          for suffix, fused in layout.fused_keys.items() if all(role in roles for role in fused)})
            layers.append(LayerShapes(layout, prefix, stage.depth, layer))
            globals_.update({layout.key(key, prefix): global_roles[role]
                             for key, (role, _) in layout.global_roles.items() if role in global_roles})
            if index:
                merged = MERGED * spec.stages[index - 1].width
                globals_.update({prefix + self.merge_key(index, suffix): shape for suffix, shape in (
                    ("downsample.norm.weight", (merged,)), ("downsample.norm.bias", (merged,)),
                    ("downsample.reduction.weight", (stage.width, merged)))})
        return ModelShapes(tuple(layers), globals_)

    def parameter_count(self, spec: ArchSpec) -> int:
        return self.model_shapes(spec).parameter_count()

    def largest_role_elements(self, spec: ArchSpec) -> int:
        return self.model_shapes(spec).largest_role_elements()

    def no_weight_decay_roles(self) -> frozenset[str]:
        return frozenset({"rel_pos_bias"})  # timm's no_weight_decay keyword for Swin
