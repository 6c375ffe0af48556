"""Hugging Face ViT (`ViTForImageClassification`, model_type vit) and DeiT
(`DeiTForImageClassification`, `DeiTForImageClassificationWithTeacher`,
model_type deit) folders  <->  (ArchSpec, Stack): two declarations, each
read and written by an `hf_image.HfImageAdapter` instance.

Declared as data (`HfLayout`), with the timm ViT's role names (arch/vit.py),
so every resize method treats both the same: separate query/key/value,
pre-LayerNorm blocks (layernorm_before is norm1, layernorm_after norm2), a
class token (and DeiT's distillation token), learned positions, a patch
projection, a final LayerNorm and the classifier (DeiT with a teacher: a
class-token and a distillation-token classifier).
"""

from __future__ import annotations

from ..stack import CLASSES, EMBED, FIXED, TOKENS
from .base import IMAGE_CLASSIFICATION
from .hf_layout import HfLayout
from .hf_image import SIZE_FIELDS, HfImageAdapter, ImageArchitecture

BLOCK_KEYS = {
    "layernorm_before.weight": "norm1_weight", "layernorm_before.bias": "norm1_bias",
    "attention.attention.query.weight": "q", "attention.attention.query.bias": "q_bias",
    "attention.attention.key.weight": "k", "attention.attention.key.bias": "k_bias",
    "attention.attention.value.weight": "v", "attention.attention.value.bias": "v_bias",
    "attention.output.dense.weight": "o", "attention.output.dense.bias": "o_bias",
    "layernorm_after.weight": "norm2_weight", "layernorm_after.bias": "norm2_bias",
    "intermediate.dense.weight": "fc1", "intermediate.dense.bias": "fc1_bias",
    "output.dense.weight": "fc2", "output.dense.bias": "fc2_bias",
}
EMBEDDING_KEYS = {
    "embeddings.cls_token": ("cls_token", (FIXED, FIXED, EMBED)),
    "embeddings.position_embeddings": ("pos_embed", (FIXED, TOKENS, EMBED)),
    "embeddings.patch_embeddings.projection.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
    "embeddings.patch_embeddings.projection.bias": ("patch_embed_bias", (EMBED,)),
    "layernorm.weight": ("norm_weight", (EMBED,)),
    "layernorm.bias": ("norm_bias", (EMBED,)),
}
CLASSIFIER = {"classifier.weight": ("head_weight", (CLASSES, EMBED)), "classifier.bias": ("head_bias", (CLASSES,))}

VIT_LAYOUT = HfLayout(
    family="hf-vit",
    config_classes={"vit": "ViTConfig"},
    base_prefix="vit.",
    layers="encoder.layer",
    architectures={"ViTForImageClassification": ImageArchitecture(
        IMAGE_CLASSIFICATION, "AutoModelForImageClassification", prefixed=True, head_keys=tuple(CLASSIFIER))},
    layer_keys=BLOCK_KEYS,
    base_globals=EMBEDDING_KEYS,
    head_globals=CLASSIFIER,
    size_fields=SIZE_FIELDS,
    image_processor="ViTImageProcessor",
)

TEACHER_HEADS = {
    "cls_classifier.weight": ("head_weight", (CLASSES, EMBED)), "cls_classifier.bias": ("head_bias", (CLASSES,)),
    "distillation_classifier.weight": ("head_dist_weight", (CLASSES, EMBED)),
    "distillation_classifier.bias": ("head_dist_bias", (CLASSES,)),
}
DEIT_LAYOUT = HfLayout(
    family="hf-deit",
    config_classes={"deit": "DeiTConfig"},
    base_prefix="deit.",
    layers="encoder.layer",
    architectures={
        "DeiTForImageClassification": ImageArchitecture(
            IMAGE_CLASSIFICATION, "AutoModelForImageClassification", prefixed=True, head_keys=tuple(CLASSIFIER)),
        # The Auto class maps deit to the plain class: the load line names this one.
        "DeiTForImageClassificationWithTeacher": ImageArchitecture(
            IMAGE_CLASSIFICATION, "DeiTForImageClassificationWithTeacher", prefixed=True,
            head_keys=tuple(TEACHER_HEADS)),
    },
    layer_keys=BLOCK_KEYS,
    base_globals={**EMBEDDING_KEYS, "embeddings.distillation_token": ("dist_token", (FIXED, FIXED, EMBED))},
    # Both classes' heads; each class has its own (`ImageArchitecture.head_keys`).
    head_globals={**CLASSIFIER, **TEACHER_HEADS},
    size_fields=SIZE_FIELDS,
    image_processor="DeiTImageProcessor",
)


# Instances, not subclasses: each family is its declaration.
VIT_ADAPTER = HfImageAdapter(VIT_LAYOUT)
DEIT_ADAPTER = HfImageAdapter(DEIT_LAYOUT)
