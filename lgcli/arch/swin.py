"""timm SwinTransformer  <->  (ArchSpec with stages, Stack with stages), read
and written in stages by `staged.StagedAdapter` (which transformers' Swin,
hf_swin.py, shares), with timm's toolkit (`timm`).

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

The original Microsoft layout (what its repository saves: the patch merging
at the end of a stage, ``layers.{i}.downsample`` before stage i + 1, and the
head ``head.*``) is read through `microsoft_layout`, the renaming timm's
`checkpoint_filter_fn` does (transformers' merge_offset = 1, the same
remap); lg writes timm's layout.

The heads and the window are read exactly from the tables; the image size is
not in a state dict: it comes from lg's metadata, else is assumed to be the
size at which the last stage is one window (patch x window x 2^(stages - 1):
224 for every Swin-T/S/B/L at window 7, 384 at window 12), and the spec
records that it was assumed.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ..errors import LgError
from ..lazy import nn, torch
from ..stack import CLASSES, EMBED, FIXED, ArchSpec, Stack
from .declared import Layout, memory_reader
from .shapes import window_of_table
from .staged import StagedAdapter
from .timm import (BLOCK_KEYS as TIMM_BLOCK_KEYS, QKV_BIAS, QKV_ROLES, TIMM_HUB_CONFIG, TimmClassifier,
                   is_timm_hub_config, json_shown, local_dir_call, positive_number,
                   timm_hub_folder_config, timm_hub_meta_model, timm_stated_preprocessing)
from .timm_family import renamed

FAMILY = "swin"
MODEL_NAME = "swin_tiny_patch4_window7_224"
# A Swin block's keys are a timm ViT block's (without layer scale or q/k
# norm), and its relative position table.
BLOCK_KEYS = {**{key: role for key, role in TIMM_BLOCK_KEYS.items() if role not in ("ls1", "ls2") and "q_norm" not in key
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
    return Layout(family=FAMILY, layers=f"layers.{index}.blocks", layer_keys=BLOCK_KEYS, fused_keys=QKV_ROLES,
                  base_globals=base, ignored=IGNORED)


# Where a spec says it was read from the Microsoft layout (its load line then
# renames as timm does).
MICROSOFT = "microsoft_layout"
# timm's sign of the Microsoft layout: stage 0 has a patch merging (timm's never has).
MICROSOFT_MARK = "layers.0.downsample.reduction.weight"


def microsoft_layout(state_dict: Mapping[str, Any]) -> dict[str, str]:
    """{timm's key: the Microsoft layout's} for a state dict in that layout
    (none for timm's), as timm's swin `checkpoint_filter_fn` renames: each
    merging to the stage after (merging at the end of stage i is merging at
    the start of stage i + 1), the head under ``head.fc``."""
    if MICROSOFT_MARK not in state_dict:
        return {}
    renames = {}
    for key in state_dict:
        new = re.sub(r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m.group(1)) + 1}.downsample.", key)
        new = "head.fc." + key[len("head."):] if key.startswith("head.") else new
        if new != key:
            renames[new] = key
    return renames


def _not_swin(found: str) -> str:
    return ("not a timm SwinTransformer checkpoint: expected patch_embed.proj, layers.N.blocks.M.{norm1,"
            "attn.qkv,attn.relative_position_bias_table,attn.proj,norm2,mlp.fc1,mlp.fc2}, "
            f"layers.N.downsample.{{norm,reduction}} (N >= 1), norm, head.fc; {found}")


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
    if "mlp_ratio" in config and not positive_number(config["mlp_ratio"]):
        raise LgError("the file's lg.config field mlp_ratio must be a positive number")
    for key in ("qkv_bias", "img_size_assumed"):
        if key in config and type(config[key]) is not bool:
            raise LgError(f"the file's lg.config field {key} must be true or false")
    if "model_name" in config and config["model_name"] != MODEL_NAME:
        raise LgError(f"the file's lg.config names model {config['model_name']!r}, not {MODEL_NAME!r}")
    return dict(config)


class SwinAdapter(TimmClassifier, StagedAdapter):
    """timm SwinTransformer state dicts (`lgcli.arch.base.FamilyAdapter`), as
    stages (see the module's docstring)."""

    family = FAMILY
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

    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader=None, kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        """`StagedAdapter.to_stack`, the Microsoft layout renamed first (nothing read)."""
        state, reader = renamed(state_dict, reader, microsoft_layout, memory_reader)
        spec, stack = super().to_stack(state, config, heads, reader, kv_heads)
        if state is not state_dict:
            spec = dataclasses.replace(spec, extras={**spec.extras, MICROSOFT: True})
        return spec, stack

    @staticmethod
    def misplaced_merge(index: int) -> str:
        return _not_swin(f"layers.{index} has a downsample and no stage follows it")

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

    # ------------------------------------------------------------ timm's models
    @staticmethod
    def load_imports(spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        return "import safetensors.torch, timm"

    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The exact line that builds the model in timm and loads the file
        strictly (a timm hub folder: the folder says the rest, as for a ViT)."""
        weights = f"safetensors.torch.load_file({path!r})"
        if spec.extras.get(MICROSOFT):  # timm's own renaming of that layout (a no-op on timm's: lg writes that)
            weights = f"timm.models.swin_transformer.checkpoint_filter_fn({weights}, model)"
        return local_dir_call(spec, path) or self.file_load_call(spec, path, weights)

    @staticmethod
    def inspect_fields(spec: ArchSpec) -> list[tuple[str, str, Any]]:
        e = spec.extras
        # Shown only when assumed (None hides a row): a plain timm file does not record it.
        assumed = True if e.get("img_size_assumed") else None
        return [("patch_size", "patch size", e["patch_size"]), ("img_size", "image size", e["img_size"]),
                ("img_size_assumed", "image size assumed (the last stage one window)", assumed),
                ("window_size", "window size", e["window_size"]), ("in_chans", "channels", e["in_chans"]),
                ("num_classes", "classes", e["num_classes"])]

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a recorded ``lg.config`` describes, and its stack on the
        meta device (every role's shape, no memory), read as a checkpoint's is
        from the state dict of the model timm builds from it."""
        import timm

        try:
            with torch.device("meta"):
                checked = check_config(config)
                name = checked.get("model_name", MODEL_NAME)
                if name != MODEL_NAME:
                    raise LgError(f"the file's lg.config names model {name!r}, not the timm Swin lg builds")
                model = timm.create_model(MODEL_NAME, pretrained=False,
                                          **{k: checked[k] for k in CONFIG_KEYS if k in checked})
        except (TypeError, ValueError, AssertionError, RuntimeError, KeyError) as exc:
            raise LgError(f"the file's lg.config does not describe a {self.family} ({exc})".splitlines()[0]) from None
        return self.to_stack(model.state_dict(), config=config)

    @staticmethod
    def model_name(spec: ArchSpec) -> str:
        return MODEL_NAME

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
