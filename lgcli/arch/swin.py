"""timm SwinTransformer  <->  (ArchSpec with stages, Stack with stages); and
`StagedAdapter`, what every form of a Swin shares (transformers' in hf_swin.py).

A Swin is a sequence of stages (`stack.ArchSpec.stages`), each a canonical
Stack of its own depth, width, heads and MLP, declared per stage as data
(`stage_layout`: ``layers.{i}.blocks.{j}.*``) and read and written by
`declared`. Every tensor belongs to the stage whose width its axes are on,
so that a method resizes it with the stage (`methods.stages`):

- the patch embedding (and its norm) to the first stage;
- the patch merging before stage i (timm's ``layers.{i}.downsample``: a
  LayerNorm over 4C and a Linear 4C -> 2C, C the width of stage i - 1) to
  stage i, seen as (out = embed, 4 neighbours, stage_in = C): a linear map
  whose input is 4 blocks of the previous stage's width, each resized by the
  method's own width rule (select picks the same elements of every block,
  clone tiles each block and divides by the copies along stage_in, BoT
  transforms each block), so the 2 x 2 neighbourhood stays whole;
- the final norm and the head to the last stage.

Each block's relative position bias table, ((2W - 1)^2, heads), is per
layer (role `rel_pos_bias`, axes layer, -, heads): its heads follow the
stage's heads, which follow the width at a fixed head dim (SPEC.md "Text
families": H' = D'/d), and a method treats that axis by its own rule (select
keeps the heads it selects, clone tiles them as it tiles q/k/v's heads);
the window (2W - 1)^2 axis is never resized. The index buffers and shifted
window masks are computed by timm from the window and image size, not stored
(older checkpoints that carry them have them skipped).

The heads and the window are read exactly from the tables; the image size is
not in a state dict: it comes from lg's metadata, else is assumed to be the
size at which the last stage is one window (patch x window x 2^(stages - 1):
224 for every Swin-T/S/B/L at window 7, 384 at window 12), and the spec
records that it was assumed.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ..lazy import nn, torch

from ..errors import LgError
from ..stack import CLASSES, EMBED, FIXED, STAGE_IN, ArchSpec, RoleMap, Stack, TensorGroup, axes_and_shape
from .base import IMAGE_CLASSIFICATION, Reader
from .declared import (DeclaredAdapter, Layout, StoredTensors, checked_reading, compute_dtype,
                       memory_reader)
from .vit import BLOCK_KEYS as VIT_BLOCK_KEYS
from .vit import (QKV_BIAS, QKV_WEIGHT, TIMM_HUB_CONFIG, is_timm_hub_config, json_shown, local_dir_call,
                  refuse_unloadable, timm_hub_folder_config, timm_hub_meta_model, timm_stated_preprocessing)

FAMILY = "swin"
MODEL_NAME = "swin_tiny_patch4_window7_224"
# Neighbours a patch merging concatenates (a 2 x 2 patch of the stage before).
MERGED = 4

# A Swin block's keys are a timm ViT block's (without layer scale or q/k
# norm), and its relative position table.
BLOCK_KEYS = {**{key: role for key, role in VIT_BLOCK_KEYS.items() if role not in ("ls1", "ls2") and "q_norm" not in key
                 and "k_norm" not in key},
              "attn.relative_position_bias_table": "rel_pos_bias"}
FIRST_STAGE_GLOBALS: dict[str, tuple[str, tuple[str, ...]]] = {
    "patch_embed.proj.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
    "patch_embed.proj.bias": ("patch_embed_bias", (EMBED,)),
    "patch_embed.norm.weight": ("patch_norm_weight", (EMBED,)),
    "patch_embed.norm.bias": ("patch_norm_bias", (EMBED,)),
}
LAST_STAGE_GLOBALS: dict[str, tuple[str, tuple[str, ...]]] = {
    "norm.weight": ("norm_weight", (EMBED,)),
    "norm.bias": ("norm_bias", (EMBED,)),
    "head.fc.weight": ("head_weight", (CLASSES, EMBED)),
    "head.fc.bias": ("head_bias", (CLASSES,)),
}
# The patch merging at the start of stage i >= 1 (after "layers.{i}."), in
# its canonical shape: the 4C axis as (4 neighbours, C).
MERGE_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "downsample.norm.weight": ("merge_norm_weight", (FIXED, STAGE_IN)),
    "downsample.norm.bias": ("merge_norm_bias", (FIXED, STAGE_IN)),
    "downsample.reduction.weight": ("merge_weight", (EMBED, FIXED, STAGE_IN)),
}
# Buffers timm computes (relative position indices, shifted windows' masks);
# older checkpoints carry them and timm's loader drops them.
IGNORED = (r"\.relative_position_index$", r"\.attn_mask$")

# The timm constructor arguments lg records and passes (in this order).
CONFIG_KEYS = ("embed_dim", "depths", "num_heads", "window_size", "img_size", "patch_size", "in_chans",
               "num_classes", "mlp_ratio", "qkv_bias")
CONFIG_INTS = {"embed_dim": 1, "window_size": 1, "img_size": 1, "patch_size": 1, "in_chans": 1, "num_classes": 0}


def stage_layout(index: int, count: int) -> Layout:
    """Stage `index` of `count` as a declared family: its blocks, and the
    globals on its width (patch embedding: first; final norm, head: last)."""
    base = {**(FIRST_STAGE_GLOBALS if index == 0 else {}), **(LAST_STAGE_GLOBALS if index == count - 1 else {})}
    return Layout(family=FAMILY, layers=f"layers.{index}.blocks", layer_keys=BLOCK_KEYS,
                  fused_keys={QKV_WEIGHT: ("q", "k", "v"), QKV_BIAS: ("q_bias", "k_bias", "v_bias")},
                  base_globals=base, ignored=IGNORED)


def _not_swin(found: str) -> str:
    return ("not a timm SwinTransformer checkpoint: expected patch_embed.proj, layers.N.blocks.M.{norm1,"
            "attn.qkv,attn.relative_position_bias_table,attn.proj,norm2,mlp.fc1,mlp.fc2}, "
            f"layers.N.downsample.{{norm,reduction}} (N >= 1), norm, head.fc; {found}")


def window_of_table(positions: int) -> int | None:
    """W of a relative position table of (2W - 1)^2 rows (None: no such W)."""
    side = math.isqrt(positions)
    return (side + 1) // 2 if side * side == positions and side % 2 == 1 else None


def stage_windows(extras: Mapping[str, Any], stages: int) -> list[int]:
    """The window of each stage, as timm builds it: the configured window,
    clamped to the stage's resolution (image / patch / 2^i, rounded up) where
    that is smaller (timm then does not shift either)."""
    resolution = -(-int(extras["img_size"]) // int(extras["patch_size"]))
    windows = []
    for _ in range(stages):
        windows.append(min(int(extras["window_size"]), resolution))
        resolution = -(-resolution // 2)
    return windows


def _positive_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def is_swin_hub_config(config: Any) -> bool:
    """A timm hub folder's config.json of a Swin (v1: `swinv2_*` is another model)."""
    return is_timm_hub_config(config) and config["architecture"].startswith("swin_")


def hub_model_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The timm arguments a Swin hub folder's config.json means, read off the
    model timm builds from it (the architecture's defaults fill what
    model_args leaves out, as `local-dir:` does); the config is kept under
    TIMM_HUB_CONFIG, for the output folder."""
    from timm.models.swin_transformer import SwinTransformer

    model, _ = timm_hub_meta_model(config, SwinTransformer, "timm's Swin Transformers (swin_*)")
    image = tuple(model.patch_embed.img_size)
    if image[0] != image[1] or model.global_pool != "avg":
        raise LgError(f"config.json builds a Swin of image size {image} pooled by {json_shown(model.global_pool)}; "
                      f"lg reads square, average-pooled Swins")
    stages = list(model.layers)
    return {"embed_dim": int(model.embed_dim), "depths": [len(stage.blocks) for stage in stages],
            "num_heads": [int(stage.blocks[0].attn.num_heads) for stage in stages],
            # The first stage's window (timm clamps none above it): the same model as the configured one.
            "window_size": int(stages[0].blocks[0].window_size[0]), "img_size": int(image[0]),
            TIMM_HUB_CONFIG: dict(config)}


def check_config(config: Any) -> dict[str, Any]:
    """A recorded ``lg.config`` of a Swin, every field lg uses checked (a
    timm hub folder's config.json: what it builds)."""
    if config is None:
        return {}
    if is_swin_hub_config(config):
        return hub_model_config(config)
    if not isinstance(config, Mapping):
        raise LgError(f"the file's lg.config must be a JSON object, found {type(config).__name__}")
    for key, minimum in CONFIG_INTS.items():
        if key in config and not (type(config[key]) is int and config[key] >= minimum):
            raise LgError(f"the file's lg.config field {key} must be a whole number of at least {minimum}")
    for key in ("depths", "num_heads"):
        if key in config and not (isinstance(config[key], (list, tuple)) and config[key]
                                  and all(type(v) is int and v >= 1 for v in config[key])):
            raise LgError(f"the file's lg.config field {key} must be a list of whole numbers of at least 1")
    if "mlp_ratio" in config and not _positive_number(config["mlp_ratio"]):
        raise LgError("the file's lg.config field mlp_ratio must be a positive number")
    for key in ("qkv_bias", "img_size_assumed"):
        if key in config and type(config[key]) is not bool:
            raise LgError(f"the file's lg.config field {key} must be true or false")
    if "model_name" in config and config["model_name"] != MODEL_NAME:
        raise LgError(f"the file's lg.config names model {config['model_name']!r}, not {MODEL_NAME!r}")
    return dict(config)


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


def _stored_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A merging tensor's shape in the file: (4, C) -> 4C."""
    return (*shape[:-2], shape[-2] * shape[-1])


class StagedAdapter:
    """What every form of a Swin shares (timm's, `SwinAdapter`; transformers',
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
      `misplaced_merge`, `not_family`."""

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
        if heads is not None:
            raise LgError("a Swin's heads are read from its relative position tables: --source-heads does not apply")
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

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a recorded ``lg.config`` describes, and its stack on the
        meta device (every role's shape, no memory), read as a checkpoint's is
        from the state dict of the model the family builds from it."""
        try:
            with torch.device("meta"):
                model = self.model_from_config(config)
        except (TypeError, ValueError, AssertionError, RuntimeError, KeyError) as exc:
            raise LgError(f"the file's lg.config does not describe a {self.family} ({exc})".splitlines()[0]) from None
        return self.to_stack(model.state_dict(), config=config)

    def model_from_config(self, config: Mapping[str, Any]) -> nn.Module:
        """The family's model a recorded configuration describes (built where the caller says)."""
        raise NotImplementedError

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
        return {role: axes for role, axes in
                [*FIRST_STAGE_GLOBALS.values(), *LAST_STAGE_GLOBALS.values(), *MERGE_KEYS.values()]}

    # ------------------------------------------------------------ sizes
    def _role_sizes(self, spec: ArchSpec) -> tuple[list[tuple[int, list[int]]], list[int]]:
        """Elements of every role, from sizes alone: per stage (depth, one
        block's roles), and the tensors outside blocks."""
        e = spec.extras
        stages, others = [], []
        for index, (stage, window) in enumerate(zip(spec.stages, self.windows(spec))):
            width, attn, mlp = stage.width, stage.attn_dim, stage.mlp_dim
            bias = attn if e["qkv_bias"] else 0
            block = [width] * 4 + [(2 * window - 1) ** 2 * stage.heads, attn * width, attn * width, attn * width,
                                   bias, bias, bias, width * attn, width, mlp * width, mlp, width * mlp, width]
            stages.append((stage.depth, block))
            if index:
                previous = spec.stages[index - 1].width
                others += [MERGED * previous] * 2 + [width * MERGED * previous]
        first, last = spec.stages[0].width, spec.stages[-1].width
        patch = int(e["patch_size"])
        others += [first * int(e["in_chans"]) * patch * patch, first, first, first, last, last]
        if e["num_classes"]:
            others += [int(e["num_classes"]) * last, int(e["num_classes"])]
        return stages, others

    def parameter_count(self, spec: ArchSpec) -> int:
        stages, others = self._role_sizes(spec)
        return sum(depth * sum(block) for depth, block in stages) + sum(others)

    def largest_role_elements(self, spec: ArchSpec) -> int:
        stages, others = self._role_sizes(spec)
        return max([depth * max(block) for depth, block in stages] + others)

    def no_weight_decay_roles(self) -> frozenset[str]:
        return frozenset({"rel_pos_bias"})  # timm's no_weight_decay keyword for Swin


class SwinAdapter(StagedAdapter):
    """timm SwinTransformer state dicts (`lgcli.arch.base.FamilyAdapter`), as
    stages (see the module's docstring)."""

    family = FAMILY
    writes_folder = False
    library = "timm"
    fine_tune = ("timm's `train.py` (or your own loop) on the model the load line builds; it takes the "
                 "images at the size and channels the line gives")
    stage_root = "layers"
    merge_offset = 0  # timm merges at the start of a stage

    # ------------------------------------------------------------ reading
    @staticmethod
    def recognises(state_dict: Mapping[str, torch.Tensor]) -> bool:
        return "layers.0.blocks.0.attn.relative_position_bias_table" in state_dict

    @staticmethod
    def recognises_config(config: Mapping[str, Any]) -> bool:
        """A folder's config.json read by this adapter: a timm hub folder's of a Swin."""
        return is_swin_hub_config(config)

    @staticmethod
    def stage_layout(index: int, count: int) -> Layout:
        return stage_layout(index, count)

    @staticmethod
    def not_family(found: str) -> str:
        return _not_swin(found)

    @staticmethod
    def misplaced_merge(index: int) -> str:
        return _not_swin(f"layers.{index} has a downsample: the original Microsoft layout (merging at the end of a "
                         f"stage); load it in timm and save its state_dict first")

    @staticmethod
    def checked_config(config: Any) -> dict[str, Any]:
        return check_config(config)

    @staticmethod
    def stage_extras(state_dict: Mapping[str, torch.Tensor], prefix: str, specs: list[ArchSpec],
                     config: Mapping[str, Any]) -> dict:
        return _extras(state_dict, specs, config)

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        _check_agreement(config, self.model_args(spec))

    @staticmethod
    def windows(spec: ArchSpec) -> list[int]:
        return stage_windows(spec.extras, len(spec.stages))

    # ------------------------------------------------------------ writing
    @staticmethod
    def write_prefix(spec: ArchSpec) -> str:
        return ""

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        return self.from_stack(spec, stack)

    def saved_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return {name: tensor.detach() for name, tensor in model.state_dict().items()}

    @staticmethod
    def model_args(spec: ArchSpec) -> dict[str, Any]:
        """timm's SwinTransformer arguments for `spec` (timm doubles the width
        per stage from embed_dim; `staged_target_spec` keeps that ratio)."""
        e = spec.extras
        first = spec.stages[0]
        return {"embed_dim": first.width, "depths": tuple(s.depth for s in spec.stages),
                "num_heads": tuple(s.heads for s in spec.stages), "window_size": e["window_size"],
                "img_size": e["img_size"], "patch_size": e["patch_size"], "in_chans": e["in_chans"],
                "num_classes": e["num_classes"], "mlp_ratio": first.mlp_dim / first.width,
                "qkv_bias": e["qkv_bias"]}

    def config(self, spec: ArchSpec) -> dict[str, Any]:
        """What lg records in ``lg.config``: the timm name and its arguments."""
        args = self.model_args(spec)
        # An image size lg assumed (no metadata said it) stays said to be
        # assumed in what lg writes, rather than recorded as if known.
        assumed = {"img_size_assumed": True} if spec.extras.get("img_size_assumed") else {}
        return {"model_name": MODEL_NAME, **{k: list(v) if isinstance(v, tuple) else v for k, v in args.items()},
                **assumed}

    def folder_config(self, spec: ArchSpec) -> dict[str, Any] | None:
        """The config.json of a timm hub folder of `spec` when it was read
        from one (else None: one file), with the sizes a resize changes."""
        hub = spec.extras.get(TIMM_HUB_CONFIG)
        if hub is None:
            return None
        args = self.model_args(spec)
        sizes = {key: list(args[key]) if isinstance(args[key], tuple) else args[key]
                 for key in ("embed_dim", "depths", "num_heads", "mlp_ratio")}
        # A Swin's pooled features are its last stage's width.
        return timm_hub_folder_config(hub, sizes, spec.stages[-1].width, args["num_classes"], spec)

    @staticmethod
    def stated_preprocessing(spec: ArchSpec, companions: Mapping[str, Any], input_size: tuple[int, int, int]):
        """A timm hub folder's `pretrained_cfg` (`vit.timm_stated_preprocessing`)."""
        return timm_stated_preprocessing(spec, input_size)

    @staticmethod
    def rewrite_companion(name: str, data: bytes, spec: ArchSpec) -> bytes:
        return data

    def check_loadable(self, spec: ArchSpec, state: Mapping[str, Any]) -> None:
        """Refuse a state dict timm would not load strictly for the arguments
        lg records (built on the meta device: shapes only)."""
        with torch.device("meta"):
            model = self.create_model(spec)
        refuse_unloadable({key: tuple(t.shape) for key, t in model.state_dict().items()}, state)

    # ------------------------------------------------------------ timm's models
    @staticmethod
    def load_imports(spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        return "import safetensors.torch, timm"

    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The exact line that builds the model in timm and loads the file
        strictly (a timm hub folder: the folder says the rest, as for a ViT)."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_args(spec).items())
        return local_dir_call(spec, path) or (f"timm.create_model({MODEL_NAME!r}, pretrained=False, {args}); "
                                              f"model.load_state_dict(safetensors.torch.load_file({path!r}), "
                                              f"strict=True)")

    @staticmethod
    def inspect_fields(spec: ArchSpec) -> list[tuple[str, str, Any]]:
        e = spec.extras
        # Shown only when assumed (None hides a row): a plain timm file does not record it.
        assumed = True if e.get("img_size_assumed") else None
        return [("patch_size", "patch size", e["patch_size"]), ("img_size", "image size", e["img_size"]),
                ("img_size_assumed", "image size assumed (the last stage one window)", assumed),
                ("window_size", "window size", e["window_size"]), ("in_chans", "channels", e["in_chans"]),
                ("num_classes", "classes", e["num_classes"])]

    def model_from_config(self, config: Mapping[str, Any]) -> nn.Module:
        import timm

        config = check_config(config)
        name = config.get("model_name", MODEL_NAME)
        if name != MODEL_NAME:
            raise LgError(f"the file's lg.config names model {name!r}, not the timm Swin lg builds")
        return timm.create_model(MODEL_NAME, pretrained=False, **{k: config[k] for k in CONFIG_KEYS if k in config})

    def create_model(self, spec: ArchSpec, seed: int | None = None) -> nn.Module:
        import timm

        if seed is not None:
            torch.manual_seed(seed)
        return timm.create_model(MODEL_NAME, pretrained=False, **self.model_args(spec))

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack:
        model = self.create_model(spec, seed=seed)
        return self.to_stack(model.state_dict(), config=self.config(spec))[1]

    def load_model(self, spec: ArchSpec, stack: Stack) -> nn.Module:
        model = self.create_model(spec)
        model.load_state_dict(self.from_stack(spec, stack), strict=True)
        return model

    @staticmethod
    def owns_model(model: nn.Module) -> bool:
        layers = getattr(model, "layers", None)
        return (hasattr(model, "patch_embed") and isinstance(layers, nn.Sequential) and len(layers) > 0
                and hasattr(layers[0], "blocks"))

    def spec_of_model(self, model: nn.Module) -> dict[str, Any]:
        if not self.owns_model(model):
            raise LgError(f"{type(model).__name__} is not a timm SwinTransformer")
        return {"img_size": int(model.patch_embed.img_size[0])}

    @staticmethod
    def model_task(model: nn.Module) -> str:
        return IMAGE_CLASSIFICATION

    @staticmethod
    def scored_by_lg(spec: ArchSpec) -> bool:
        return True

    @staticmethod
    def model_input(model: nn.Module) -> tuple[int, int]:
        return int(model.patch_embed.proj.in_channels), int(model.patch_embed.img_size[0])

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        channels, image_size = self.model_input(model)
        stages = list(model.layers)
        return {"depth": sum(len(s.blocks) for s in stages), "width": int(model.embed_dim),
                "heads": int(stages[0].blocks[0].attn.num_heads),
                "depths": [len(s.blocks) for s in stages],
                "patch_size": int(model.patch_embed.patch_size[0]), "img_size": image_size,
                "in_chans": channels, "num_classes": int(model.num_classes),
                "parameters": sum(p.numel() for p in model.parameters())}

    @staticmethod
    def input_size(spec: ArchSpec) -> tuple[int, int, int]:
        e = spec.extras
        return (int(e["in_chans"]), int(e["img_size"]), int(e["img_size"]))


def _extras(state_dict: Mapping[str, torch.Tensor], specs: list[ArchSpec], config: Mapping[str, Any]) -> dict:
    """What a Swin is besides its stages' sizes: patches, channels, classes,
    window (exact, from the tables), image size (recorded, else assumed)."""
    patch = state_dict.get("patch_embed.proj.weight")
    if patch is None or patch.shape[-1] != patch.shape[-2]:
        raise LgError(_not_swin("no square patch embedding (patch_embed.proj.weight)"))
    if "patch_embed.norm.weight" not in state_dict:
        raise LgError(_not_swin("no patch_embed.norm (timm's Swin normalises its patches)"))
    tables = [window_of_table(state_dict[f"layers.{i}.blocks.0.attn.relative_position_bias_table"].shape[0])
              for i in range(len(specs))]
    if None in tables:
        raise LgError(_not_swin("a relative position table's rows are no (2W - 1)^2"))
    head = state_dict.get("head.fc.weight")
    extras = {"patch_size": int(patch.shape[-1]), "in_chans": int(patch.shape[1]),
              "num_classes": int(head.shape[0]) if head is not None else 0,
              "window_size": config.get("window_size", max(tables)),
              "qkv_bias": f"layers.0.blocks.0.{QKV_BIAS}" in state_dict}
    extras["img_size"] = config.get("img_size", extras["patch_size"] * extras["window_size"] * 2 ** (len(specs) - 1))
    extras["img_size_assumed"] = "img_size" not in config or config.get("img_size_assumed") is True
    if TIMM_HUB_CONFIG in config:
        extras[TIMM_HUB_CONFIG] = config[TIMM_HUB_CONFIG]
    expected = stage_windows(extras, len(specs))
    if expected != tables:
        raise LgError(_not_swin(f"the position tables' windows {tables} are not those of window {extras['window_size']} "
                                f"at image size {extras['img_size']} ({expected})"))
    return extras


def _check_agreement(config: Mapping[str, Any], derived: Mapping[str, Any]) -> None:
    """Each recorded field must say what the tensors say."""
    for key, value in config.items():
        if key not in derived or key in ("img_size", "window_size"):
            continue  # taken from the record, and checked against the tables in _extras
        found = derived[key]
        if key == "mlp_ratio":
            agrees = int(derived["embed_dim"] * value) == int(derived["embed_dim"] * found)
        else:
            agrees = (list(value) == list(found)) if isinstance(found, tuple) else value == found
        if not agrees:
            raise LgError(f"the file's lg.config says {key} {value}, its tensors say {found}")
