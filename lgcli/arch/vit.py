"""timm VisionTransformer / DeiT  <->  (ArchSpec, Stack), declared as data
(`VIT`) and read by `timm_family.TimmAdapter`.

The mapping follows SPEC.md "Conventions": fused ``attn.qkv`` rows are
ordered (q|k|v, head, head_dim), so q, k and v are the three equal row
blocks; everything is kept in PyTorch's (out, in) layout. The declaration
reads the variants timm's VisionTransformer builds from its arguments: DeiT
distilled (``dist_token``, another registered model), DINOv2-style register
tokens, DeiT-III's position table without the prefix tokens
(``no_embed_class``), q/k norms and layer scale (EVA-style blocks).

What cannot be read from a state dict (heads, pooling when ambiguous) comes
from the file's lg metadata when present; heads otherwise from the caller,
else from q/k-norm sizes (exact), else the DeiT/ViT convention d = 64, and
the spec records that the number was assumed. A timm hub folder is read as
timm reads it (`TimmFamily.hub_architectures`), and a single file's load line names
the registered model whose architecture it has (`timm_vit_names`). A ViT
with norm_pre is built as timm's CLIP ViT (`CLIP_MODEL_NAME`): timm
registers no other pre-norm ViT of LayerNorms, and CLIP's have eps 1e-5,
the other ViTs' 1e-6, which no tensor shows.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..errors import LgError
from ..lazy import nn
from ..stack import CLASSES, EMBED, FIXED, TOKENS, ArchSpec
from .declared import Layout
from .timm import BLOCK_KEYS, QKV_BIAS, QKV_ROLES, json_shown, positive_number
from .timm_family import ARGS, SHAPES, TimmFamily
from .timm_vit_names import registered_name, registered_preprocessing

PLAIN_MODEL_NAME = "vit_base_patch16_224"
DISTILLED_MODEL_NAME = "deit_base_distilled_patch16_224"
# A ViT with norm_pre: timm registers these as its CLIP ViTs alone, whose
# LayerNorms have eps 1e-5 (the others' 1e-6), which no tensor shows.
CLIP_MODEL_NAME = "vit_base_patch16_clip_224"
Shape = tuple[int, ...]

# Global state dict key -> (role, axes); the blocks' keys are timm's (`timm.BLOCK_KEYS`).
GLOBAL_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cls_token": ("cls_token", (FIXED, FIXED, EMBED)),
    "dist_token": ("dist_token", (FIXED, FIXED, EMBED)),
    "reg_token": ("reg_token", (FIXED, FIXED, EMBED)),
    "pos_embed": ("pos_embed", (FIXED, TOKENS, EMBED)),
    "patch_embed.proj.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
    "patch_embed.proj.bias": ("patch_embed_bias", (EMBED,)),
    "norm_pre.weight": ("pre_norm_weight", (EMBED,)),
    "norm_pre.bias": ("pre_norm_bias", (EMBED,)),
    "norm.weight": ("norm_weight", (EMBED,)),
    "norm.bias": ("norm_bias", (EMBED,)),
    "fc_norm.weight": ("fc_norm_weight", (EMBED,)),
    "fc_norm.bias": ("fc_norm_bias", (EMBED,)),
    "head.weight": ("head_weight", (CLASSES, EMBED)),
    "head.bias": ("head_bias", (CLASSES,)),
    "head_dist.weight": ("head_dist_weight", (CLASSES, EMBED)),
    "head_dist.bias": ("head_dist_bias", (CLASSES,)),
}
LAYOUT = Layout(family="vit", layers="blocks", layer_keys=BLOCK_KEYS, fused_keys=QKV_ROLES, base_globals=GLOBAL_KEYS)

# The timm constructor arguments lg records and passes (in this order).
CONFIG_KEYS = ("depth", "embed_dim", "num_heads", "mlp_ratio", "patch_size", "img_size",
               "in_chans", "num_classes", "global_pool", "class_token", "reg_tokens",
               "no_embed_class", "pre_norm", "final_norm", "fc_norm", "qkv_bias", "qk_norm",
               "proj_bias", "init_values")
# What each recorded lg.config field must be: checked, never coerced.
CONFIG_INTS = {"depth": 1, "embed_dim": 1, "num_heads": 1, "patch_size": 1, "img_size": 1, "in_chans": 1,
               "num_classes": 0, "reg_tokens": 0}  # field -> minimum
CONFIG_BOOLS = ("class_token", "no_embed_class", "pre_norm", "final_norm", "qkv_bias", "qk_norm", "proj_bias")
# Pooling lg reads and evaluates (timm's "map" adds keys lg does not map; ""
# classifies every token).
GLOBAL_POOLS = ("token", "avg", "max", "avgmax")
# Layer scale's starting value where nothing records it: it shapes a random model only.
LAYER_SCALE_INIT = 1e-5


def check_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded ``lg.config``, every field lg uses checked for type and
    range; the fields timm's VisionTransformer is built with (`CONFIG_KEYS`)."""
    def bad(key: str, expected: str) -> LgError:
        return LgError(f"the file's lg.config field {key} must be {expected}, found {json_shown(config[key])}")

    for key, minimum in CONFIG_INTS.items():
        if key in config and not (type(config[key]) is int and config[key] >= minimum):
            raise bad(key, f"a whole number of at least {minimum}")
    for key in CONFIG_BOOLS:
        if key in config and type(config[key]) is not bool:
            raise bad(key, "true or false")
    if "fc_norm" in config and config["fc_norm"] is not None and type(config["fc_norm"]) is not bool:
        raise bad("fc_norm", "true, false or null")
    if "init_values" in config and config["init_values"] is not None and not positive_number(config["init_values"]):
        raise bad("init_values", "a positive number or null")
    if "global_pool" in config and config["global_pool"] not in GLOBAL_POOLS:
        raise bad("global_pool", " or ".join(repr(p) for p in GLOBAL_POOLS))
    if config.get("global_pool") == "token" and config.get("class_token") is False:
        raise LgError("the file's lg.config pools the class token (global_pool 'token') but has none")
    return {key: config[key] for key in ("model_name", *CONFIG_KEYS) if key in config}


def arguments(globals_: Mapping[str, Shape], block: Mapping[str, Shape]) -> dict[str, Any]:
    """VisionTransformer's arguments beyond the sizes, from the tensors'
    shapes; the pooling and, where two patch grids fit the position table,
    the image size as the tensors suggest (`recorded_arguments` settles them)."""
    patch = globals_.get("patch_embed.proj.weight")
    if patch is None:
        raise LgError(_not_vit("no patch embedding (patch_embed.proj.weight)"))
    if len(patch) != 4 or patch[2] != patch[3]:
        raise LgError(_not_vit(f"patch_embed.proj.weight of shape {patch} is not (D, C, p, p)"))
    if "pos_embed" not in globals_:
        raise LgError(_not_vit("no learned position embedding (pos_embed)"))
    class_token, distilled, fc_norm = "cls_token" in globals_, "dist_token" in globals_, "fc_norm.weight" in globals_
    reg_tokens = globals_["reg_token"][1] if "reg_token" in globals_ else 0
    prefix, tokens = class_token + distilled + reg_tokens, globals_["pos_embed"][1]
    # pos_embed covers the prefix tokens too unless no_embed_class (DeiT-III style).
    if tokens > prefix and math.isqrt(tokens - prefix) ** 2 == tokens - prefix:
        no_embed_class, patches = False, tokens - prefix
    elif math.isqrt(tokens) ** 2 == tokens:
        no_embed_class, patches = True, tokens
    else:
        raise LgError(_not_vit(f"pos_embed has {tokens} tokens: neither it nor it minus {prefix} "
                               f"prefix tokens is a square patch grid"))
    head = globals_.get("head.weight")
    return {"patch_size": patch[2], "img_size": math.isqrt(patches) * patch[2], "in_chans": patch[1],
            "num_classes": head[0] if head else 0,
            # No class token, or MAE-style fc_norm after pooling: average pooling.
            "global_pool": "token" if distilled or (class_token and not fc_norm) else "avg",
            "class_token": class_token, "reg_tokens": reg_tokens, "no_embed_class": no_embed_class,
            "pre_norm": "norm_pre.weight" in globals_,
            # timm puts the final norm after pooling (fc_norm) or before it (norm).
            "final_norm": "norm.weight" in globals_ or fc_norm, "fc_norm": fc_norm,
            "qkv_bias": QKV_BIAS in block, "qk_norm": "attn.q_norm.weight" in block,
            "proj_bias": "attn.proj.bias" in block,
            "init_values": LAYER_SCALE_INIT if "ls1.gamma" in block else None}


def recorded_arguments(config: Mapping[str, Any], args: dict[str, Any], globals_: Mapping[str, Shape],
                       where: str) -> dict[str, Any]:
    """The arguments with what a recorded config settles (pooling, the image
    size of a position table two grids fit, layer scale's start), refused
    where the config says other than the tensors. A recorded null is timm's
    default, not a statement about the tensors."""
    args = {**args, "global_pool": config.get("global_pool", args["global_pool"])}
    if args["global_pool"] == "token" and not args["class_token"]:
        raise LgError("the file's lg.config pools the class token (global_pool 'token'), "
                      "but the tensors have no cls_token")
    if "img_size" in config and "no_embed_class" in config:
        img_size, no_embed_class, patch = config["img_size"], config["no_embed_class"], args["patch_size"]
        prefix = args["class_token"] + ("dist_token" in globals_) + args["reg_tokens"]
        expected, tokens = (img_size // patch) ** 2 + (0 if no_embed_class else prefix), globals_["pos_embed"][1]
        if tokens != expected:
            raise LgError(f"the file's lg.config (img_size {img_size}, patch {patch}, no_embed_class "
                          f"{str(no_embed_class).lower()}) means {expected} position tokens; pos_embed has {tokens}")
        args.update(img_size=img_size, no_embed_class=no_embed_class)
    if args["init_values"] is not None:
        args["init_values"] = config.get("init_values", LAYER_SCALE_INIT)
    for key, value in config.items():
        if key not in args or key in ("fc_norm", "init_values") and value is None:
            continue
        agrees = args[key] is not None if key == "init_values" else value == args[key]
        if not agrees:
            raise LgError(f"{where} says {key} {json_shown(value)}, its tensors say {json_shown(args[key])}")
    return args


def live_arguments(model: nn.Module) -> dict[str, Any]:
    """What a live VisionTransformer was built with (heads, pooling, ...)."""
    img_size = model.patch_embed.img_size
    size = tuple(img_size) if isinstance(img_size, (tuple, list)) else (img_size, img_size)
    if size[0] != size[1]:
        raise LgError(f"the model's image size {size[0]}x{size[1]} is not square; lg reads square ViTs")
    if model.global_pool not in GLOBAL_POOLS:
        raise LgError(f"the model's global_pool {json_shown(model.global_pool)} is not one lg reads "
                      f"({', '.join(repr(p) for p in GLOBAL_POOLS)})")
    block = model.blocks[0] if len(model.blocks) else None
    layer_scale = getattr(getattr(block, "ls1", None), "gamma", None) is not None
    return {"num_heads": block.attn.num_heads if block is not None else None, "global_pool": model.global_pool,
            "no_embed_class": bool(model.no_embed_class), "img_size": int(size[0]),
            "init_values": LAYER_SCALE_INIT if layer_scale else None}


def inspect_fields(spec: ArchSpec) -> list[tuple[str, str, Any]]:
    """What `lg inspect` shows of a ViT beyond the sizes every family has."""
    args = spec.extras[ARGS]
    prefix = args["class_token"] + ("dist_token" in spec.extras[SHAPES]["globals"]) + args["reg_tokens"]
    return [("patch_size", "patch size", args["patch_size"]), ("img_size", "image size", args["img_size"]),
            ("in_chans", "channels", args["in_chans"]), ("num_classes", "classes", args["num_classes"]),
            ("prefix_tokens", "prefix tokens", prefix), ("pooling", "pooling", args["global_pool"])]


def _not_vit(found: str) -> str:
    return ("not a timm VisionTransformer checkpoint lg reads: expected blocks.N.{norm1,attn.qkv,attn.proj,"
            f"norm2,mlp.fc1,mlp.fc2}}, patch_embed.proj, pos_embed; {found}")


VIT = TimmFamily(
    layout=LAYOUT, model_name=PLAIN_MODEL_NAME, model_class="timm.models.vision_transformer.VisionTransformer",
    marker="patch_embed.proj.weight", arguments=arguments, name="timm VisionTransformer",
    no_weight_decay=frozenset({"pos_embed", "cls_token", "dist_token", "reg_token"}),
    variants={"dist_token": DISTILLED_MODEL_NAME, "norm_pre.weight": CLIP_MODEL_NAME}, hub_architectures=("",),
    check_config=check_config,
    recorded_arguments=recorded_arguments, live_arguments=live_arguments,
    registered=lambda args, name: registered_name(args, name == DISTILLED_MODEL_NAME, name),
    registered_preprocessing=registered_preprocessing, inspect_fields=inspect_fields)
