"""CLIP's vision tower as Hugging Face saves it (`CLIPVisionModel`,
`CLIPVisionModelWithProjection`; config.json model_type clip_vision_model)
and with a classifier on it (`CLIPForImageClassification`; model_type clip)
<->  (ArchSpec, Stack).

Declared as data, with the timm ViT's role names as hf_vit.py does: a
pre-LayerNorm ViT (`layer_norm1` is norm1, `self_attn.out_proj` is o) whose
patch projection has no bias, whose class token (`class_embedding`) is one
vector and whose positions are an embedding table (tokens, width); a
LayerNorm over the embeddings before the first layer (`pre_layrnorm`,
transformers' spelling: timm's `norm_pre`) and one over the pooled class
token after the last (`post_layernorm`: timm's `fc_norm`, after pooling);
quick_gelu is the config's, untouched. `CLIPVisionModelWithProjection`
adds `visual_projection` (projection_dim, width), which maps the pooled
feature into the space CLIP shares with its text tower: its input axis is
the width, its output (projection_dim) is never resized, as a classifier's
classes are not.

transformers 5 saves a `CLIPVisionModel` without the `vision_model.` prefix
its live model and older saves have; lg reads both, and writes what
save_pretrained writes. A whole `CLIPModel` folder (model_type clip) holds
the text tower too: lg refuses it in one line saying how to take the vision
tower out (carrying a text tower through every method untouched is not
something the canonical view expresses).

`CLIPForImageClassification` is the tower (`vision_model.*`) and
`classifier` (classes, width), which reads the mean of the patch tokens the
last layer leaves (the class token left out, and no final norm:
post_layernorm is kept but unused). Its config.json is a CLIPConfig (model_type
clip, as a CLIPModel's) whose `vision_config` holds the tower's sizes and
image geometry (`ImageArchitecture.tower_config`); its text_config, with no
weights, is carried as it is. transformers' from_pretrained of a
CLIPVisionModel folder as this class reads the CLIPVisionConfig as a
default CLIPConfig (a random 12-layer model), so lg's advice for a model of
features here is a recipe that builds it (`CLASSIFIER_RECIPE`).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import LgError
from ..stack import CLASSES, EMBED, FIXED, TOKENS, ArchSpec, Stack
from .base import IMAGE_CLASSIFICATION
from .hf_layout import HfLayout, config_int
from .hf_image import SIZE_FIELDS, HfImageAdapter, ImageArchitecture

BLOCK_KEYS = {
    "layer_norm1.weight": "norm1_weight", "layer_norm1.bias": "norm1_bias",
    "self_attn.q_proj.weight": "q", "self_attn.q_proj.bias": "q_bias",
    "self_attn.k_proj.weight": "k", "self_attn.k_proj.bias": "k_bias",
    "self_attn.v_proj.weight": "v", "self_attn.v_proj.bias": "v_bias",
    "self_attn.out_proj.weight": "o", "self_attn.out_proj.bias": "o_bias",
    "layer_norm2.weight": "norm2_weight", "layer_norm2.bias": "norm2_bias",
    "mlp.fc1.weight": "fc1", "mlp.fc1.bias": "fc1_bias",
    "mlp.fc2.weight": "fc2", "mlp.fc2.bias": "fc2_bias",
}
EMBEDDING_KEYS = {
    "embeddings.class_embedding": ("cls_token", (EMBED,)),
    "embeddings.patch_embedding.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
    "embeddings.position_embedding.weight": ("pos_embed", (TOKENS, EMBED)),
    "pre_layrnorm.weight": ("pre_norm_weight", (EMBED,)),
    "pre_layrnorm.bias": ("pre_norm_bias", (EMBED,)),
    "post_layernorm.weight": ("fc_norm_weight", (EMBED,)),
    "post_layernorm.bias": ("fc_norm_bias", (EMBED,)),
}
PROJECTION = {"visual_projection.weight": ("head_projection_weight", (CLASSES, EMBED))}
# CLIPForImageClassification's classifier, on the mean of the patch tokens the last layer leaves.
CLASSIFIER = {"classifier.weight": ("head_weight", (CLASSES, EMBED)), "classifier.bias": ("head_bias", (CLASSES,))}

WHOLE_CLIP = "clip"  # a CLIPModel's model_type: refused, with the way to its vision tower
WHOLE_CLIP_REFUSED = ("a CLIPModel folder holds a text tower beside the vision tower, and lg resizes the vision "
                      "tower alone: save it as a folder of its own first, with transformers."
                      "CLIPVisionModelWithProjection.from_pretrained(FOLDER).save_pretrained(VISION_FOLDER)")


# What makes a classifier of a CLIPVisionModel(WithProjection) folder: CLIPForImageClassification.from_pretrained
# on it would read its CLIPVisionConfig as a default CLIPConfig and build a random full-size model. Run as printed,
# with FOLDER, N and OUT set in the shell (`lg eval` and the others do not know the folder's path).
TO_CLASSIFIER = (
    "import os, shutil, sys, transformers as T; T.logging.set_verbosity_error(); folder, n, out = sys.argv[1:4]; "
    "tower = T.CLIPVisionModel.from_pretrained(folder); "
    "model = T.CLIPForImageClassification(T.CLIPConfig(vision_config=tower.config.to_dict(), num_labels=int(n))); "
    "model.vision_model.load_state_dict(tower.state_dict()); model.save_pretrained(out); "
    "p = os.path.join(folder, \"preprocessor_config.json\"); os.path.isfile(p) and shutil.copy(p, out)")
CLASSIFIER_RECIPE = (
    "save it as transformers' CLIPForImageClassification (a new head of N classes on the same weights; that class's "
    "config.json is a CLIPConfig holding the tower's config as vision_config, so its from_pretrained(FOLDER, "
    "num_labels=N) would build a default CLIP instead): with FOLDER its folder, N the classes and OUT the new "
    f"folder set in the shell, run python -c '{TO_CLASSIFIER}' \"$FOLDER\" \"$N\" \"$OUT\" (which copies the "
    "folder's preprocessor_config.json too: its mean, std and image size)")


def check_config(config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
    """config.json's projection_dim must be the projection's outputs (`HfLayout.check_config`)."""
    if "head_projection_weight" in stack.globals:
        rows = stack.globals.axes_and_shape("head_projection_weight")[1][0]
        try:
            said = config_int(config, "projection_dim", required=False)
        except ValueError as exc:
            raise LgError(f"config.json: {exc}") from None
        if said is not None and said != rows:
            raise LgError(f"config.json says projection_dim {said}; visual_projection has {rows} outputs")


def inspect_fields(spec: ArchSpec) -> list[tuple[str, str, Any]]:
    config = spec.extras.get("config") or {}
    with_projection = set(PROJECTION) <= set(LAYOUT.architectures[spec.extras["architecture"]].head_keys)
    return [("projection_dim", "projection", config.get("projection_dim") if with_projection else None)]


LAYOUT = HfLayout(
    family="hf-clip",
    # clip: CLIPForImageClassification's alone (a CLIPModel's is refused).
    config_classes={"clip_vision_model": "CLIPVisionConfig", WHOLE_CLIP: "CLIPConfig"},
    base_prefix="vision_model.",
    layers="encoder.layers",
    architectures={
        "CLIPVisionModel": ImageArchitecture(IMAGE_CLASSIFICATION, "AutoModel", prefixed=False,
                                             classifier_recipe=CLASSIFIER_RECIPE),
        # No Auto class loads this one: the load line names it.
        "CLIPVisionModelWithProjection": ImageArchitecture(
            IMAGE_CLASSIFICATION, "CLIPVisionModelWithProjection", prefixed=True, head_keys=tuple(PROJECTION),
            classifier_recipe=CLASSIFIER_RECIPE),
        # Its config.json is a CLIPConfig (model_type clip) whose vision_config holds the tower's.
        "CLIPForImageClassification": ImageArchitecture(
            IMAGE_CLASSIFICATION, "AutoModelForImageClassification", prefixed=True, head_keys=tuple(CLASSIFIER),
            model_type=WHOLE_CLIP, tower_config="vision_config"),
    },
    layer_keys=BLOCK_KEYS,
    base_globals=EMBEDDING_KEYS,
    # Each class's own (`ImageArchitecture.head_keys`).
    head_globals={**PROJECTION, **CLASSIFIER},
    size_fields=SIZE_FIELDS,
    refused_model_types={WHOLE_CLIP: WHOLE_CLIP_REFUSED},
    image_processor="CLIPImageProcessor",
    check_config=check_config,
    inspect_fields=inspect_fields,
)

# An instance, not a subclass: the family is its declaration.
CLIP_VISION_ADAPTER = HfImageAdapter(LAYOUT)
