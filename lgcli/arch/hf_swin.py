"""Hugging Face Swin folders (`SwinForImageClassification`, `SwinModel`;
model_type swin)  <->  (ArchSpec with stages, Stack with stages).

The same stage view as timm's Swin (swin.py; `staged.StagedAdapter` reads and
writes both): each stage declared as data with the timm Swin's role names,
the patch merging before stage i as (out, 4 neighbours, stage_in), the
relative position tables with a `heads` axis. What differs, said here:

- keys (``swin.encoder.layers.N.blocks.M.attention.self.query``: query, key
  and value apart; ``layernorm_before``/``layernorm_after`` are norm1/norm2;
  ``intermediate.dense``/``output.dense`` fc1/fc2); `SwinModel` is saved
  without the ``swin.`` prefix and has no classifier;
- the patch merging sits at the END of stage N (``encoder.layers.N.downsample``),
  before stage N + 1: it is stage N + 1's, as in timm. Its 4 neighbours are
  concatenated in timm's order (both take the 2 x 2 patch row offset
  fastest), so the 4C axis maps one to one (tests/test_hf_swin.py converts a
  timm Swin and compares the logits);
- every stage's position table is the configured window's: transformers
  clamps the window at run time only;
- the configuration is config.json (required: the image size and labels are
  there alone); a resize writes its embed_dim, depths, num_heads and
  hidden_size (embed_dim · 2^(stages - 1)).

Keys are those save_pretrained writes (transformers 5 renames the live
model's: `hf_image.HfImageAdapter` maps between them where a live model is
built).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..errors import LgError
from ..lazy import nn, torch
from ..stack import CLASSES, EMBED, FIXED, ArchSpec, Stack, TensorGroup
from .base import IMAGE_CLASSIFICATION, Reader
from .declared import Layout
from .hf import MAX_CONFIG_PARAMS
from .hf_layout import HfLayout
from .hf_image import HfImageAdapter, ImageArchitecture
from .shapes import ModelShapes, window_of_table
from .staged import StagedAdapter

BLOCK_KEYS = {
    "layernorm_before.weight": "norm1_weight", "layernorm_before.bias": "norm1_bias",
    "attention.self.query.weight": "q", "attention.self.query.bias": "q_bias",
    "attention.self.key.weight": "k", "attention.self.key.bias": "k_bias",
    "attention.self.value.weight": "v", "attention.self.value.bias": "v_bias",
    "attention.self.relative_position_bias_table": "rel_pos_bias",
    "attention.output.dense.weight": "o", "attention.output.dense.bias": "o_bias",
    "layernorm_after.weight": "norm2_weight", "layernorm_after.bias": "norm2_bias",
    "intermediate.dense.weight": "fc1", "intermediate.dense.bias": "fc1_bias",
    "output.dense.weight": "fc2", "output.dense.bias": "fc2_bias",
}
# The globals on the first stage's width (the patch embedding) and on the
# last's (the final norm; the classifier, `CLASSIFIER`), with the timm Swin's
# role names (swin.py), so every method treats both forms the same.
PATCH_EMBEDDING = "embeddings.patch_embeddings.projection.weight"
FIRST_STAGE = {
    PATCH_EMBEDDING: ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
    "embeddings.patch_embeddings.projection.bias": ("patch_embed_bias", (EMBED,)),
    "embeddings.norm.weight": ("patch_norm_weight", (EMBED,)),
    "embeddings.norm.bias": ("patch_norm_bias", (EMBED,)),
}
LAST_STAGE = {"layernorm.weight": ("norm_weight", (EMBED,)), "layernorm.bias": ("norm_bias", (EMBED,))}
CLASSIFIER = {"classifier.weight": ("head_weight", (CLASSES, EMBED)), "classifier.bias": ("head_bias", (CLASSES,))}
# Buffers older checkpoints carry (transformers ignores them on load).
IGNORED = (r"\.relative_position_index$",)

LAYOUT = HfLayout(
    family="hf-swin",
    config_classes={"swin": "SwinConfig"},
    base_prefix="swin.",
    layers="encoder.layers",
    architectures={
        "SwinForImageClassification": ImageArchitecture(
            IMAGE_CLASSIFICATION, "AutoModelForImageClassification", prefixed=True, head_keys=tuple(CLASSIFIER)),
        "SwinModel": ImageArchitecture(IMAGE_CLASSIFICATION, "AutoModel", prefixed=False),
    },
    layer_keys=BLOCK_KEYS,
    base_globals={**FIRST_STAGE, **LAST_STAGE},
    head_globals=CLASSIFIER,
    ignored=IGNORED,
    image_processor="ViTImageProcessor",
)
# config.json's whole-number fields lg reads (and their least values).
CONFIG_INTS = {"embed_dim": 1, "window_size": 1, "image_size": 1, "patch_size": 1, "num_channels": 1}


def stage_layout(index: int, count: int) -> Layout:
    """Stage `index` of `count`: its blocks, and the globals on its width
    (patch embedding: first; final norm and classifier: last)."""
    last = index == count - 1
    return Layout(family=LAYOUT.family, layers=f"encoder.layers.{index}.blocks", layer_keys=BLOCK_KEYS,
                  base_globals={**(FIRST_STAGE if index == 0 else {}), **(LAST_STAGE if last else {})},
                  base_prefix=LAYOUT.base_prefix, head_globals=CLASSIFIER if last else {}, ignored=IGNORED)


def _config_error(found: str) -> LgError:
    return LgError(f"config.json: {found}")


def not_family(found: str) -> str:
    return ("not a Hugging Face Swin lg reads: expected [swin.]embeddings.patch_embeddings.projection, "
            "[swin.]encoder.layers.N.blocks.M.{layernorm_before,attention.self.{query,key,value,"
            "relative_position_bias_table},attention.output.dense,layernorm_after,intermediate.dense,"
            f"output.dense}}, encoder.layers.N.downsample.{{norm,reduction}} (not the last N), layernorm; {found}")


def size_fields(spec: ArchSpec) -> dict[str, Any]:
    """The config.json fields a resize changes, as `spec` has them."""
    return {"embed_dim": spec.stages[0].width, "depths": [s.depth for s in spec.stages],
            "num_heads": [s.heads for s in spec.stages], "hidden_size": spec.stages[-1].width}


class SwinStages(StagedAdapter):
    """A Hugging Face Swin's weights, read and written in stages by
    `staged.StagedAdapter`: a member of the family's `HfSwinAdapter` (which
    holds its config.json and transformers' models), answering what the
    stage reader asks of a form of Swin (`StagedAdapter`'s list)."""

    stage_root = "encoder.layers"
    merge_offset = 1  # transformers merges at the end of the stage before
    stage_layout = staticmethod(stage_layout)
    not_family = staticmethod(not_family)

    def __init__(self, adapter: HfSwinAdapter) -> None:
        self.adapter, self.family = adapter, adapter.family

    def key_prefix(self, state_dict: Mapping[str, torch.Tensor]) -> str:
        prefix = LAYOUT.base_prefix
        return prefix if any(k.startswith(prefix) for k in state_dict) else ""

    def misplaced_merge(self, index: int) -> str:
        return not_family(f"the last stage (encoder.layers.{index}) has a downsample")

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        return self.adapter.checked_config(config)

    def write_prefix(self, spec: ArchSpec) -> str:
        return self.adapter.write_prefix(spec)

    def create_model(self, spec: ArchSpec) -> nn.Module:
        return self.adapter.create_model(spec)

    def live_keys(self, model: nn.Module, keys: list[str]) -> list[str]:
        return self.adapter.live_keys(model, keys)

    def stage_extras(self, state_dict: Mapping[str, torch.Tensor], prefix: str, specs: list[ArchSpec],
                     config: Mapping[str, Any]) -> dict:
        """The model class and its config.json; the geometry the sizes need
        (swin.py's extras: patches, channels, classes, window, image size)."""
        adapter = self.adapter
        if not config:
            raise adapter.config_missing()
        heads_found = {key: state_dict[key] for key in CLASSIFIER if key in state_dict}
        architecture = adapter._architecture(config, heads_found, prefix)
        wanted = LAYOUT.architectures[architecture].head_keys
        if set(heads_found) != set(wanted):
            raise LgError(f"{architecture} has the head tensors {', '.join(wanted) or 'none'}; the weights have "
                          f"{', '.join(sorted(heads_found)) or 'none'}")
        patch = state_dict.get(prefix + PATCH_EMBEDDING)
        if patch is None or patch.dim() != 4 or patch.shape[-1] != patch.shape[-2]:
            raise LgError(not_family(f"no square patch embedding ({prefix}{PATCH_EMBEDDING})"))
        tables = {window_of_table(state_dict[f"{prefix}encoder.layers.{i}.blocks.0.attention.self."
                                             f"relative_position_bias_table"].shape[0]) for i in range(len(specs))}
        window = config.get("window_size", 7)
        if tables != {window}:
            raise LgError(f"config.json says window_size {window}; the position tables are of windows "
                          f"{sorted(tables, key=str)}")
        head = state_dict.get("classifier.weight")
        return {"architecture": architecture, "config": adapter._base_config(config, architecture),
                "patch_size": int(patch.shape[-1]), "in_chans": int(patch.shape[1]),
                "num_classes": int(head.shape[0]) if head is not None else 0, "window_size": window,
                "img_size": config.get("image_size", 224),
                "qkv_bias": any(key.endswith("attention.self.query.bias") for key in state_dict)}

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        """config.json must say what the weights say."""
        said = dict(config)
        has = size_fields(spec)
        has.update(patch_size=spec.extras["patch_size"], num_channels=spec.extras["in_chans"])
        for key, value in has.items():
            if key in said and said[key] != value:
                raise LgError(f"config.json says {key} {said[key]}; the weights have {value}")
        ratio = said.get("mlp_ratio", 4.0)
        if any(int(stage.width * ratio) != stage.mlp_dim for stage in spec.stages):
            raise LgError(f"config.json says mlp_ratio {ratio}; the weights' MLPs are "
                          f"{', '.join(str(s.mlp_dim) for s in spec.stages)} wide")

    @staticmethod
    def windows(spec: ArchSpec) -> list[int]:
        return [int(spec.extras["window_size"])] * len(spec.stages)


class HfSwinAdapter(HfImageAdapter):
    """A Hugging Face Swin: an image family (`HfImageAdapter`: config.json,
    transformers' models, lg's training of a classifier) whose weights are
    read and written in stages by its member `stages` (`SwinStages`, a
    `staged.StagedAdapter`): composed, not inherited from both. The one HF
    image family with stages, so a class of its own (see the module's
    docstring); shared modules only, no other family's."""

    def __init__(self, layout: HfLayout) -> None:
        super().__init__(layout)
        self.stages = SwinStages(self)

    # ------------------------------------------------------------ reading
    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        table = "encoder.layers.0.blocks.0.attention.self.relative_position_bias_table"
        return table in state_dict or self.layout.base_prefix + table in state_dict

    def not_family(self, found: str) -> str:
        return not_family(found)

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """config.json, every field lg uses checked (never coerced)."""
        config = super().checked_config(config)
        for key, minimum in CONFIG_INTS.items():
            if key in config and not (type(config[key]) is int and config[key] >= minimum):
                raise _config_error(f"field {key} must be a whole number of at least {minimum} (lg reads square "
                                    f"images, patches and windows)")
        for key in ("depths", "num_heads"):
            if key in config and not (isinstance(config[key], list) and config[key]
                                      and all(type(v) is int and v >= 1 for v in config[key])):
                raise _config_error(f"field {key} must be a list of whole numbers of at least 1")
        ratio = config.get("mlp_ratio", 4.0)
        if not (type(ratio) in (int, float) and math.isfinite(ratio) and ratio > 0):
            raise _config_error("field mlp_ratio must be a positive number")
        if config.get("use_absolute_embeddings"):
            raise _config_error("use_absolute_embeddings is true: lg reads Swins without absolute position "
                                "embeddings (transformers' default)")
        return config

    def _bound_config(self, config: Mapping[str, Any]) -> None:
        """A recorded config's rough size, before transformers builds it:
        each stage's blocks at its width (doubling per stage)."""
        width, depths = config.get("embed_dim"), config.get("depths")
        if type(width) is not int or not isinstance(depths, list) or not all(type(d) is int for d in depths):
            raise LgError("the Swin's config (config.json, or the lg.config a file records) gives no whole "
                          "embed_dim and list of whole depths")
        rough = sum(depth * (width << index) ** 2 * 12 for index, depth in enumerate(depths))
        if rough > MAX_CONFIG_PARAMS:
            raise LgError(f"the config describes a model of about {rough:.3g} parameters; lg reads at most "
                          f"{MAX_CONFIG_PARAMS:.3g}")

    # ------------------------------------------------------------ the stages' (`SwinStages`)
    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None,
                 kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        return self.stages.to_stack(state_dict, config, heads, reader, kv_heads)

    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        return self.stages.write_plan(spec, stack)

    def model_shapes(self, spec: ArchSpec) -> ModelShapes:
        return self.stages.model_shapes(spec)

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        return self.stages.model_buffers(spec)

    def global_role_axes(self) -> dict[str, tuple[str, ...]]:
        return self.stages.global_role_axes()

    def no_weight_decay_roles(self) -> frozenset[str]:
        return self.stages.no_weight_decay_roles()

    def stage_layer_modules(self, spec: ArchSpec, model: nn.Module) -> list[dict[str, list[str]]]:
        return self.stages.stage_layer_modules(spec, model)

    # ------------------------------------------------------------ config.json
    def set_sizes(self, config: dict[str, Any], spec: ArchSpec) -> None:
        config.update(size_fields(spec))

    def _bound(self, spec: ArchSpec) -> None:
        if self.parameter_count(spec) > MAX_CONFIG_PARAMS:
            raise LgError(f"a Swin of {self.parameter_count(spec):.3g} parameters is more than lg builds "
                          f"({MAX_CONFIG_PARAMS:.3g})")

    def _names_key(self, spec: ArchSpec, stack: Stack) -> tuple:
        return (spec.extras["architecture"], tuple(s.depth for s in spec.stages))

    # ------------------------------------------------------------ images
    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        e = spec.extras
        return [("architecture", "architecture", e["architecture"]), ("patch_size", "patch size", e["patch_size"]),
                ("img_size", "image size", e["img_size"]), ("window_size", "window size", e["window_size"]),
                ("in_chans", "channels", e["in_chans"]), ("num_classes", "classes", e["num_classes"] or None)]

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        config = model.config
        return {"depth": sum(config.depths), "width": config.embed_dim, "heads": config.num_heads[0],
                "depths": list(config.depths), "architecture": type(model).__name__,
                "patch_size": config.patch_size, "img_size": config.image_size, "in_chans": config.num_channels,
                "num_classes": config.num_labels if self._classifier_key(type(model).__name__) else None,
                "parameters": sum(p.numel() for p in model.parameters())}


HF_SWIN_ADAPTER = HfSwinAdapter(LAYOUT)
