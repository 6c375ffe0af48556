"""Hugging Face DINOv2 folders (`Dinov2Model`, `Dinov2ForImageClassification`;
model_type dinov2), and DINOv2 with registers (`Dinov2WithRegistersModel`,
`Dinov2WithRegistersForImageClassification`; model_type
dinov2_with_registers)  <->  (ArchSpec, Stack).

Declared as data, with the timm ViT's role names as hf_vit.py does: a
pre-LayerNorm ViT with layer scale (`layer_scale1.lambda1` is ls1,
`layer_scale2.lambda1` ls2: one gain per width unit and layer, resized along
`embed` as every per-layer vector is), a class token, a mask token (used
only with `bool_masked_pos`, in pre-training), learned positions (which
DINOv2 interpolates at run time for other image sizes; lg keeps their
`tokens` axis as stored) and a final LayerNorm over every token. Its MLP is
fc1/fc2, or with `use_swiglu_ffn` a SwiGLU whose gate and up projections
are saved as one tensor, `mlp.weights_in` (rows gate | up), and whose down
projection is `mlp.weights_out`.

What the declaration cannot say, said here: the config gives the MLP size
as a whole `mlp_ratio` of the width (rounded for SwiGLU), so only some MLP
sizes can be written; the two MLPs share their roles, and config.json's
`use_swiglu_ffn` says which keys hold them; the classifier reads the class
token and the mean patch token side by side (`classifier.weight` is
(classes, 2·D): the role `head_weight` is (classes, 2, D), `grouped_inputs`).

DINOv2 with registers is the same declaration under its own prefix, plus
`embeddings.register_tokens` (1, R, D): R learned tokens after the class
token that every layer attends to and no output reads (the classifier's
mean runs over the patch tokens alone), the role timm's ViT calls
`reg_token`, resized along `embed`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..errors import LgError
from ..stack import CLASSES, EMBED, FIXED, TOKENS, ArchSpec, Stack
from .base import IMAGE_CLASSIFICATION
from .declared import StoredTensors
from .hf_layout import HfLayout, Sizes, config_int
from .hf_image import HfImageAdapter, ImageArchitecture

PLAIN_MLP = {"mlp.fc1.weight": "fc1", "mlp.fc1.bias": "fc1_bias", "mlp.fc2.weight": "fc2", "mlp.fc2.bias": "fc2_bias"}
SWIGLU_MLP = {"mlp.weights_out.weight": "fc2", "mlp.weights_out.bias": "fc2_bias"}
SWIGLU_FUSED = {"mlp.weights_in.weight": ("gate", "fc1"), "mlp.weights_in.bias": ("gate_bias", "fc1_bias")}
BLOCK_KEYS = {
    "norm1.weight": "norm1_weight", "norm1.bias": "norm1_bias",
    "attention.attention.query.weight": "q", "attention.attention.query.bias": "q_bias",
    "attention.attention.key.weight": "k", "attention.attention.key.bias": "k_bias",
    "attention.attention.value.weight": "v", "attention.attention.value.bias": "v_bias",
    "attention.output.dense.weight": "o", "attention.output.dense.bias": "o_bias",
    "layer_scale1.lambda1": "ls1",
    "norm2.weight": "norm2_weight", "norm2.bias": "norm2_bias",
    **PLAIN_MLP, **SWIGLU_MLP,
    "layer_scale2.lambda1": "ls2",
}
EMBEDDING_KEYS = {
    "embeddings.cls_token": ("cls_token", (FIXED, FIXED, EMBED)),
    "embeddings.mask_token": ("mask_token", (FIXED, EMBED)),
    "embeddings.position_embeddings": ("pos_embed", (FIXED, TOKENS, EMBED)),
    "embeddings.patch_embeddings.projection.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
    "embeddings.patch_embeddings.projection.bias": ("patch_embed_bias", (EMBED,)),
    "layernorm.weight": ("norm_weight", (EMBED,)),
    "layernorm.bias": ("norm_bias", (EMBED,)),
}
# Reads [class token, mean patch token]: two blocks of the width side by side.
CLASSIFIER = {"classifier.weight": ("head_weight", (CLASSES, FIXED, EMBED)),
              "classifier.bias": ("head_bias", (CLASSES,))}
DEFAULT_MLP_RATIO = 4  # Dinov2Config's

def mlp_size(width: int, ratio: int, swiglu: bool) -> int:
    """The MLP size transformers builds (Dinov2MLP, Dinov2SwiGLUFFN): the
    ratio times the width, or for SwiGLU two thirds of it rounded up to a
    multiple of 8."""
    hidden = int(width * ratio)
    return (int(hidden * 2 / 3) + 7) // 8 * 8 if swiglu else hidden


def mlp_ratio_for(width: int, mlp_dim: int, swiglu: bool) -> int:
    """The whole mlp_ratio that builds `mlp_dim` at `width` (the config class
    takes only whole ratios), else a refusal naming the sizes that can be."""
    # mlp_size grows with the ratio, by at least 2/3 of the width per step.
    for ratio in range(1, mlp_dim // max(width * 2 // 3, 1) + 3):
        if mlp_size(width, ratio, swiglu) == mlp_dim:
            return ratio
    possible = ", ".join(str(mlp_size(width, ratio, swiglu)) for ratio in range(1, 5))
    kind = "a SwiGLU MLP of two thirds of a whole mlp_ratio times the width, rounded up to a multiple of 8" \
        if swiglu else "an MLP of a whole mlp_ratio times the width"
    raise LgError(f"a DINOv2 config.json builds {kind}: at width {width}, MLP {possible}, ...; "
                  f"not {mlp_dim} (give --mlp-dim)")


def swiglu_of(config: Mapping[str, Any]) -> bool:
    value = config.get("use_swiglu_ffn", False)
    if not isinstance(value, bool):
        raise ValueError(f"field use_swiglu_ffn must be true or false, found {value!r}")
    return value


def read_sizes(config: Mapping[str, Any], sizes: Sizes) -> Sizes:
    """The MLP size config.json's mlp_ratio builds (`HfLayout.read_sizes`)."""
    ratio = config_int(config, "mlp_ratio", required=False)
    return dataclasses.replace(sizes, mlp_dim=mlp_size(sizes.width, ratio or DEFAULT_MLP_RATIO, swiglu_of(config)))


def write_sizes(config: dict[str, Any], spec: ArchSpec) -> None:
    """The mlp_ratio of the new MLP size, and the backbone's stages at the
    new depth (`HfLayout.write_sizes`)."""
    config["mlp_ratio"] = mlp_ratio_for(spec.width, spec.mlp_dim, swiglu_of(config))
    # Dinov2Backbone's stages are the layers, and the config checks its
    # outputs against them: a new depth has its own stages, and outputs
    # the last (the config class's default). The classes lg reads ignore them.
    config["stage_names"] = ["stem", *(f"stage{index}" for index in range(1, spec.depth + 1))]
    config["out_features"], config["out_indices"] = [f"stage{spec.depth}"], [spec.depth]


def check_stored(stored: StoredTensors) -> str | None:
    """One MLP or the other in a layer, not both (`HfLayout.check_stored`)."""
    if any(key in stored.first for key in PLAIN_MLP) and any(key in stored.first for key in SWIGLU_FUSED):
        return "layer 0 has both an MLP (mlp.fc1) and a SwiGLU (mlp.weights_in)"
    return None


def check_config(config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
    """config.json's use_swiglu_ffn must be the weights' MLP (`HfLayout.check_config`)."""
    swiglu = swiglu_of(config)
    if swiglu != ("gate" in stack.layers):
        found = "mlp.weights_in (SwiGLU)" if "gate" in stack.layers else "mlp.fc1 (no SwiGLU)"
        raise LgError(f"config.json says use_swiglu_ffn {str(swiglu).lower()}; the weights have {found}")


def omitted_keys(spec: ArchSpec, stack: Stack) -> set[str]:
    """The keys of the MLP this model has not (both MLPs hold fc2:
    config.json's use_swiglu_ffn says which keys): `HfLayout.omitted_keys`."""
    return set(PLAIN_MLP if "gate" in stack.layers else SWIGLU_MLP)


def inspect_fields(spec: ArchSpec) -> list[tuple[str, str, Any]]:
    config = spec.extras.get("config") or {}
    return [("swiglu_ffn", "SwiGLU MLP", bool(config.get("use_swiglu_ffn")))]


LAYOUT = HfLayout(
    family="hf-dinov2",
    config_classes={"dinov2": "Dinov2Config"},
    base_prefix="dinov2.",
    layers="encoder.layer",
    architectures={
        "Dinov2Model": ImageArchitecture(IMAGE_CLASSIFICATION, "AutoModel", prefixed=False),
        "Dinov2ForImageClassification": ImageArchitecture(
            IMAGE_CLASSIFICATION, "AutoModelForImageClassification", prefixed=True, head_keys=tuple(CLASSIFIER)),
    },
    layer_keys=BLOCK_KEYS,
    fused_keys=SWIGLU_FUSED,
    base_globals=EMBEDDING_KEYS,
    head_globals=CLASSIFIER,
    grouped_inputs={"classifier.weight": 2},
    # The MLP's size is `mlp_ratio` (`read_sizes`).
    size_fields={"depth": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads"},
    image_processor="BitImageProcessor",
    # Dinov2Embeddings interpolates its positions whatever the input size:
    # fed at the processor's 224 px, not the config's 518.
    any_image_size=True,
    read_sizes=read_sizes,
    write_sizes=write_sizes,
    check_stored=check_stored,
    check_config=check_config,
    omitted_keys=omitted_keys,
    inspect_fields=inspect_fields,
)

REGISTERS_LAYOUT = dataclasses.replace(
    LAYOUT,
    family="hf-dinov2-registers",
    config_classes={"dinov2_with_registers": "Dinov2WithRegistersConfig"},
    base_prefix="dinov2_with_registers.",
    architectures={
        "Dinov2WithRegistersModel": ImageArchitecture(IMAGE_CLASSIFICATION, "AutoModel", prefixed=False),
        "Dinov2WithRegistersForImageClassification": ImageArchitecture(
            IMAGE_CLASSIFICATION, "AutoModelForImageClassification", prefixed=True, head_keys=tuple(CLASSIFIER)),
    },
    base_globals={**EMBEDDING_KEYS, "embeddings.register_tokens": ("reg_token", (FIXED, FIXED, EMBED))},
)


# Instances, not subclasses: DINOv2, and DINOv2 with registers (the same
# declaration under its own prefix, with its register tokens).
DINOV2_ADAPTER = HfImageAdapter(LAYOUT)
REGISTERS_ADAPTER = HfImageAdapter(REGISTERS_LAYOUT)
