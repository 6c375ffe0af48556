"""timm VisionTransformer / DeiT  <->  (ArchSpec, Stack).

Key names live here and nowhere else, declared as data (`LAYOUT`), which
`declared` reads and writes. The mapping follows SPEC.md "Conventions":
fused ``attn.qkv`` rows are ordered (q|k|v, head, head_dim), so q, k and v
are the three equal row blocks; everything is kept in PyTorch's (out, in)
layout. This file adds what the declaration cannot say: a ViT's
configuration read from its tensors (patches, prefix tokens, pooling),
checked against lg's metadata, and timm's models.

What cannot be read from a state dict (heads, pooling when ambiguous) comes
from the file's lg metadata when present; heads otherwise from the caller,
else from q/k-norm sizes (exact), else the DeiT/ViT convention d = 64, and
the spec records that the number was assumed.

A timm hub folder (what `timm.models.save_for_hf` writes: config.json naming
the `architecture`, its `model_args` and `pretrained_cfg`, beside
model.safetensors) is read as timm reads it: the architecture is built on the
meta device from that config, and its sizes and heads are read off the model.
The config is kept in the spec (`TIMM_HUB_CONFIG`), so a resize of a folder
is written as one (`folder_config`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..errors import LgError
from ..lazy import nn, torch
from ..stack import CLASSES, EMBED, FIXED, TOKENS, ArchSpec, Stack
from ..preprocessing import PREPROCESSING, Preprocessing, default_preprocessing
from .base import Reader
from .declared import DeclaredAdapter, Heads, Layout, StoredTensors
from .shapes import LayerShapes, ModelShapes
from .timm import (BLOCK_KEYS, QKV_BIAS, QKV_ROLES, QKV_WEIGHT, TIMM_HUB_CONFIG, TimmClassifier,
                   check_recorded_size, is_timm_hub_config, json_shown, local_dir_call, positive_number,
                   refuse_unloadable, timm_hub_folder_config, timm_hub_meta_model, timm_stated_preprocessing)
from .timm_vit_names import registered_name, registered_preprocessing

FAMILY = "vit"
PLAIN_MODEL_NAME = "vit_base_patch16_224"
DISTILLED_MODEL_NAME = "deit_base_distilled_patch16_224"

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

# A timm ViT state dict, as data: fused qkv rows are ordered (q|k|v, head,
# head_dim), so q, k and v are the three equal row blocks; the sizes are
# timm's model_args (the MLP's is a ratio: `_mlp_ratio`).
LAYOUT = Layout(family=FAMILY, layers="blocks", layer_keys=BLOCK_KEYS, fused_keys=QKV_ROLES, base_globals=GLOBAL_KEYS,
                size_fields={"depth": "depth", "width": "embed_dim", "heads": "num_heads"})

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
# timm VisionTransformer defaults: the load call omits arguments equal to these.
TIMM_DEFAULTS = {"global_pool": "token", "class_token": True, "reg_tokens": 0,
                 "no_embed_class": False, "pre_norm": False, "final_norm": True,
                 "qkv_bias": True, "qk_norm": False, "proj_bias": True, "init_values": None,
                 "in_chans": 3}


def check_config(config: Any) -> dict[str, Any]:
    """A recorded ``lg.config``, every field lg uses checked for type and range."""
    if not isinstance(config, Mapping):
        raise LgError(f"the file's lg.config must be a JSON object, found {type(config).__name__}")

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
    if "mlp_ratio" in config and not positive_number(config["mlp_ratio"]):
        raise bad("mlp_ratio", "a positive number")
    if "init_values" in config and config["init_values"] is not None and not positive_number(config["init_values"]):
        raise bad("init_values", "a positive number or null")
    if "global_pool" in config and config["global_pool"] not in GLOBAL_POOLS:
        raise bad("global_pool", " or ".join(repr(p) for p in GLOBAL_POOLS))
    if config.get("global_pool") == "token" and config.get("class_token") is False:
        raise LgError("the file's lg.config pools the class token (global_pool 'token') but has none")
    if "model_name" in config and config["model_name"] not in (PLAIN_MODEL_NAME, DISTILLED_MODEL_NAME):
        raise bad("model_name", f"{PLAIN_MODEL_NAME!r} or {DISTILLED_MODEL_NAME!r}")
    return dict(config)


def timm_hub_model_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The timm constructor arguments a timm hub folder's config.json means,
    taken from the model timm builds from it, so nothing is guessed: the
    architecture's own defaults fill what model_args leaves out (a hub
    download records none), as `timm.create_model('local-dir:DIR')` does.
    The config itself is kept under TIMM_HUB_CONFIG, for the output folder."""
    from timm.models.vision_transformer import VisionTransformer

    model, _ = timm_hub_meta_model(config, VisionTransformer, "timm's ViTs and DeiTs")
    img_size = tuple(model.patch_embed.img_size)
    if img_size[0] != img_size[1]:
        raise LgError(f"config.json's image size {img_size[0]}x{img_size[1]} is not square; lg reads square ViTs")
    if model.global_pool not in GLOBAL_POOLS:
        raise LgError(f"config.json's global_pool {json_shown(model.global_pool)} is not one lg reads "
                      f"({', '.join(repr(p) for p in GLOBAL_POOLS)})")
    built = VitAdapter().spec_of_model(model)
    return {**built, "depth": len(model.blocks), "embed_dim": int(model.embed_dim),
            "patch_size": int(model.patch_embed.patch_size[0]), "in_chans": int(model.patch_embed.proj.in_channels),
            "num_classes": int(model.num_classes), TIMM_HUB_CONFIG: dict(config)}


def _shard_folder(spec: ArchSpec, path: str, folder: bool | None = None) -> bool:
    """Whether `path` is a folder of shards (past --shard-size), not a timm
    hub folder. `folder` says so for an output not yet written (its card is
    made beside its weights); None asks the file system."""
    import os

    is_folder = os.path.isdir(path) if folder is None else folder
    return TIMM_HUB_CONFIG not in spec.extras and is_folder


class VitAdapter(TimmClassifier, DeclaredAdapter):
    """timm VisionTransformer (and DeiT distilled) state dicts
    (`lgcli.arch.base.FamilyAdapter`): `LAYOUT` read and written by
    `declared`, and what only a ViT has (its configuration from its tensors,
    timm's models)."""

    layout = LAYOUT
    heads_may_go_unrecorded = True  # lg.config leaves out num_heads lg assumed (`config`)
    bot_wavelets: dict[str, str] = {}  # the BoT paper used haar for ViTs

    # ------------------------------------------------------------ detection
    @staticmethod
    def recognises(state_dict: Mapping[str, torch.Tensor]) -> bool:
        return "patch_embed.proj.weight" in state_dict and any(
            k.startswith("blocks.0.") for k in state_dict)

    # ------------------------------------------------------------ reading (declared.DeclaredAdapter.to_stack)
    def not_family(self, found: str) -> str:
        return _not_vit(found)

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        if config is None:
            return {}
        if is_timm_hub_config(config):
            return check_config(timm_hub_model_config(config))
        checked = check_config(config)
        checked.pop(TIMM_HUB_CONFIG, None)  # only a folder's own config.json makes the output a folder
        return checked

    @staticmethod
    def recognises_config(config: Mapping[str, Any]) -> bool:
        """A folder's config.json read by this adapter: a timm hub folder's."""
        return is_timm_hub_config(config)

    def check_required(self, stored: StoredTensors) -> None:
        if "patch_embed.proj.weight" not in stored.globals:
            raise LgError(_not_vit("no patch embedding (patch_embed.proj.weight)"))
        first = stored.first
        if QKV_WEIGHT not in first or "attn.proj.weight" not in first or "mlp.fc1.weight" not in first:
            raise LgError(_not_vit("blocks.0 lacks attn.qkv.weight, attn.proj.weight or mlp.fc1.weight"))
        width = first["attn.proj.weight"].shape[0]
        if first[QKV_WEIGHT].shape[0] % 3 or first[QKV_WEIGHT].shape[1] != width:
            raise LgError(_not_vit(f"attn.qkv.weight of shape {tuple(first[QKV_WEIGHT].shape)} "
                                   f"does not fit width {width}"))

    def heads(self, config: Mapping[str, Any], stored: StoredTensors, q_rows: int, kv_rows: int,
              requested: int | None) -> Heads:
        if TIMM_HUB_CONFIG in config:
            # A config.json of another model is refused on its sizes, before
            # its head count is tried on these tensors.
            width = int(stored.first["attn.proj.weight"].shape[0])
            for key, found in (("depth", stored.depth), ("embed_dim", width)):
                if config[key] != found:
                    raise LgError(f"config.json says {key} {config[key]}, its tensors say {found}")
        return super().heads(config, stored, q_rows, kv_rows, requested)

    def exact_heads(self, stored: StoredTensors, q_rows: int) -> int | None:
        norm = stored.first.get("attn.q_norm.weight")
        return None if norm is None else q_rows // norm.shape[0]  # q/k norm is per head_dim

    def spec_from(self, config: Mapping[str, Any], stored: StoredTensors,
                  sources: Mapping[str, tuple[str, int, tuple[int, ...]]], attention: Heads,
                  read: Reader) -> tuple[ArchSpec, StoredTensors]:
        width = int(stored.first["attn.proj.weight"].shape[0])
        extras = self._extras(stored.globals, stored.first, width, config)
        spec = ArchSpec(family=FAMILY, depth=stored.depth, width=width, heads=attention.heads,
                        head_dim=attention.head_dim, mlp_dim=sources["fc1"][2][0], extras=extras,
                        heads_assumed=attention.assumed)
        return spec, stored

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        _check_agreement(config, self.model_args(spec),
                         "config.json" if TIMM_HUB_CONFIG in config else "the file's lg.config")

    @staticmethod
    def _extras(globals_: Mapping[str, torch.Tensor], first: Mapping[str, torch.Tensor],
                width: int, config: Mapping[str, Any]) -> dict[str, Any]:
        patch = globals_["patch_embed.proj.weight"]
        if patch.dim() != 4 or patch.shape[2] != patch.shape[3]:
            raise LgError(_not_vit(f"patch_embed.proj.weight of shape {tuple(patch.shape)} is not (D, C, p, p)"))
        patch_size = int(patch.shape[2])
        in_chans = int(patch.shape[1])
        class_token = "cls_token" in globals_
        distilled = "dist_token" in globals_
        reg_tokens = int(globals_["reg_token"].shape[1]) if "reg_token" in globals_ else 0
        prefix = int(class_token) + int(distilled) + reg_tokens
        fc_norm = "fc_norm.weight" in globals_
        if "global_pool" in config:
            global_pool = config["global_pool"]
        elif distilled or (class_token and not fc_norm):
            global_pool = "token"
        else:
            # No class token, or MAE-style fc_norm after pooling: average pooling.
            global_pool = "avg"
        if "pos_embed" not in globals_:
            raise LgError(_not_vit("no learned position embedding (pos_embed)"))
        tokens = int(globals_["pos_embed"].shape[1])
        if global_pool == "token" and not class_token:
            raise LgError("the file's lg.config pools the class token (global_pool 'token'), "
                          "but the tensors have no cls_token")
        if "img_size" in config and "no_embed_class" in config:
            img_size = config["img_size"]
            no_embed_class = config["no_embed_class"]
            expected = (img_size // patch_size) ** 2 + (0 if no_embed_class else prefix)
            if tokens != expected:
                raise LgError(f"the file's lg.config (img_size {img_size}, patch {patch_size}, no_embed_class "
                              f"{str(no_embed_class).lower()}) means {expected} position tokens; pos_embed has {tokens}")
        else:
            # pos_embed covers prefix tokens too unless no_embed_class (DeiT-3 style).
            with_prefix, without = tokens - prefix, tokens
            if with_prefix > 0 and math.isqrt(with_prefix) ** 2 == with_prefix:
                no_embed_class, patches = False, with_prefix
            elif math.isqrt(without) ** 2 == without:
                no_embed_class, patches = True, without
            else:
                raise LgError(_not_vit(f"pos_embed has {tokens} tokens: neither it nor it minus {prefix} "
                                       f"prefix tokens is a square patch grid"))
            img_size = math.isqrt(patches) * patch_size
        head = globals_.get("head.weight")
        extras = {
            "patch_size": patch_size,
            "img_size": img_size,
            "in_chans": in_chans,
            "num_classes": int(head.shape[0]) if head is not None else 0,
            "global_pool": global_pool,
            "class_token": class_token,
            "distilled": distilled,
            "reg_tokens": reg_tokens,
            "prefix_tokens": prefix,
            "no_embed_class": no_embed_class,
            "pre_norm": "norm_pre.weight" in globals_,
            # timm puts the final norm after pooling (fc_norm) or before it (norm).
            "final_norm": "norm.weight" in globals_ or fc_norm,
            "fc_norm": fc_norm,
            "qkv_bias": QKV_BIAS in first,
            "qk_norm": "attn.q_norm.weight" in first,
            "proj_bias": "attn.proj.bias" in first,
            "init_values": config.get("init_values", 1e-5) if "ls1.gamma" in first else None,
        }
        if TIMM_HUB_CONFIG in config:
            extras[TIMM_HUB_CONFIG] = config[TIMM_HUB_CONFIG]
        return extras

    # ------------------------------------------------------------ timm
    def model_args(self, spec: ArchSpec) -> dict[str, Any]:
        """timm.create_model keyword arguments that rebuild this architecture."""
        e, sizes = spec.extras, LAYOUT.size_fields
        return {
            sizes["depth"]: spec.depth,
            sizes["width"]: spec.width,
            sizes["heads"]: spec.heads,
            "mlp_ratio": _mlp_ratio(spec.width, spec.mlp_dim),
            "patch_size": e["patch_size"],
            "img_size": e["img_size"],
            "in_chans": e["in_chans"],
            "num_classes": e["num_classes"],
            "global_pool": e["global_pool"],
            "class_token": e["class_token"],
            "reg_tokens": e["reg_tokens"],
            "no_embed_class": e["no_embed_class"],
            "pre_norm": e["pre_norm"],
            "final_norm": e["final_norm"],
            "fc_norm": e["fc_norm"],
            "qkv_bias": e["qkv_bias"],
            "qk_norm": e["qk_norm"],
            "proj_bias": e["proj_bias"],
            "init_values": e["init_values"],
        }

    def config(self, spec: ArchSpec) -> dict[str, Any]:
        """What lg records in ``lg.config``: the timm name and model_args,
        less the head count when it was assumed (never recorded as fact: the
        file is read with its heads assumed again)."""
        args = self.model_args(spec)
        if spec.heads_assumed:
            del args[LAYOUT.size_fields["heads"]]
        return {"model_name": self.model_name(spec), **args}

    def folder_config(self, spec: ArchSpec) -> dict[str, Any] | None:
        """The config.json of a timm hub folder of `spec`, when it was read
        from one (else None: one file): the source's, with the sizes this
        spec changes. timm builds `architecture` with `model_args` over its
        defaults, so every size a resize changes is written there."""
        hub = spec.extras.get(TIMM_HUB_CONFIG)
        if hub is None:
            return None
        args = self.model_args(spec)
        # A ViT's pooled features are its width.
        return timm_hub_folder_config(hub, {"depth": spec.depth, "embed_dim": spec.width, "num_heads": spec.heads,
                                            "mlp_ratio": args["mlp_ratio"]}, spec.width, args["num_classes"], spec)

    def stated_preprocessing(self, spec: ArchSpec, companions: Mapping[str, Any],
                             input_size: tuple[int, int, int]) -> Preprocessing | None:
        """timm's statement of how this model's images are prepared
        (`timm_stated_preprocessing`): a registered model's only when the
        file's architecture is exactly that model's."""
        name, differ = registered_name(self.model_args(spec), bool(spec.extras.get("distilled")),
                                       self.model_name(spec))
        if TIMM_HUB_CONFIG in spec.extras:
            return timm_stated_preprocessing(spec, input_size)
        return registered_preprocessing(None if differ else name, input_size)

    @staticmethod
    def model_name(spec: ArchSpec) -> str:
        return DISTILLED_MODEL_NAME if spec.extras.get("distilled") else PLAIN_MODEL_NAME

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack:
        """timm's random initialisation, as a Stack (for methods that mix in random layers)."""
        model = self.create_model(spec, seed=seed)
        _, stack = self.to_stack(model.state_dict(), config=self.model_args(spec))
        return stack

    def pretrained_cfg_overlay(self, spec: ArchSpec, path: str) -> dict[str, Any]:
        # num_classes: timm drops the head (and loads non-strictly) when it
        # differs from the pretrained config's; input_size: channels and size;
        # the rest is the preprocessing the spec carries (`lgcli.preprocessing`:
        # lg's metadata, timm's statement, else lg's own), so that
        # timm.data.resolve_data_config + create_transform feed the model as
        # lg does: one mean and std per channel, resized and cropped alike.
        e = spec.extras
        channels = e["in_chans"]
        input_size = (channels, e["img_size"], e["img_size"])
        preprocessing = e.get(PREPROCESSING) or default_preprocessing(input_size, "lg's default")
        return {"file": path, "num_classes": e["num_classes"], "input_size": input_size,
                **preprocessing.timm_cfg()}

    @staticmethod
    def load_imports(spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        return "import lgcli" if _shard_folder(spec, path, folder) else "import timm"

    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The exact Python line that loads the file strictly in timm."""
        hub_folder = local_dir_call(spec, path)
        if hub_folder is not None:
            return hub_folder
        if _shard_folder(spec, path, folder):  # timm reads one file: lg joins the shards into timm's model, strictly
            return f"lgcli.load_model({path!r})[0]"
        overlay = self.pretrained_cfg_overlay(spec, path)
        overlay_text = ", ".join(f"{k}={v!r}" for k, v in overlay.items())
        # The registered timm model this architecture is (vit_tiny_patch16_224
        # for depth 12, width 192, 3 heads, ...), else the closest, with what differs.
        args = self.model_args(spec)
        name, differ = registered_name(args, bool(spec.extras.get("distilled")), self.model_name(spec))
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()
                          if k in differ or k == "num_classes" or k == "in_chans" and v != TIMM_DEFAULTS[k])
        return f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay=dict({overlay_text}), {shown})"

    @staticmethod
    def timm_shapes(spec: ArchSpec) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
        """The state dict timm builds for `spec`, as shapes, computed from its
        sizes alone: (one block's keys after ``blocks.N.``, the global keys).
        A test checks it against timm's own models, variant by variant."""
        e = spec.extras
        width, attn, mlp, head_dim = spec.width, spec.attn_dim, spec.mlp_dim, spec.head_dim
        block = {"norm1.weight": (width,), "norm1.bias": (width,), QKV_WEIGHT: (3 * attn, width),
                 "attn.proj.weight": (width, attn), "norm2.weight": (width,), "norm2.bias": (width,),
                 "mlp.fc1.weight": (mlp, width), "mlp.fc1.bias": (mlp,), "mlp.fc2.weight": (width, mlp),
                 "mlp.fc2.bias": (width,)}
        if e.get("qkv_bias", True):
            block[QKV_BIAS] = (3 * attn,)
        if e.get("proj_bias", True):
            block["attn.proj.bias"] = (width,)
        if e.get("qk_norm"):
            for key in ("attn.q_norm.weight", "attn.q_norm.bias", "attn.k_norm.weight", "attn.k_norm.bias"):
                block[key] = (head_dim,)
        if e.get("init_values") is not None:
            block["ls1.gamma"] = block["ls2.gamma"] = (width,)
        patch, chans = int(e["patch_size"]), int(e["in_chans"])
        prefix = int(e["prefix_tokens"])
        tokens = (int(e["img_size"]) // patch) ** 2 + (0 if e["no_embed_class"] else prefix)
        glob: dict[str, tuple[int, ...]] = {"pos_embed": (1, tokens, width),
                                            "patch_embed.proj.weight": (width, chans, patch, patch)}
        if e["class_token"]:
            glob["cls_token"] = (1, 1, width)
        if e.get("distilled"):
            glob["dist_token"] = (1, 1, width)
        if e["reg_tokens"]:
            glob["reg_token"] = (1, int(e["reg_tokens"]), width)
        if e["pre_norm"]:  # timm drops the patch embedding's bias when a pre-norm follows it
            glob["norm_pre.weight"] = glob["norm_pre.bias"] = (width,)
        else:
            glob["patch_embed.proj.bias"] = (width,)
        if e["final_norm"]:
            norm = "fc_norm" if e["fc_norm"] else "norm"
            glob[f"{norm}.weight"] = glob[f"{norm}.bias"] = (width,)
        classes = int(e["num_classes"])
        if classes:
            glob["head.weight"], glob["head.bias"] = (classes, width), (classes,)
            if e.get("distilled"):
                glob["head_dist.weight"], glob["head_dist.bias"] = (classes, width), (classes,)
        return block, glob

    def model_shapes(self, spec: ArchSpec) -> ModelShapes:
        """The state dict timm builds for `spec`, as shapes (`timm_shapes`):
        what lg counts and checks, before anything is allocated."""
        block, glob = self.timm_shapes(spec)
        return ModelShapes((LayerShapes(LAYOUT, "", spec.depth, block),), glob)

    def check_loadable(self, spec: ArchSpec, state: Mapping[str, torch.Tensor | tuple[int, ...]]) -> None:
        """Refuse to write a state dict timm would not load strictly for the
        config lg records (a key missing or extra, a shape that differs).
        `state` maps names to tensors or to shapes alone (checked before
        anything is computed)."""
        refuse_unloadable(self.model_shapes(spec).state(), state)

    @staticmethod
    def inspect_fields(spec: ArchSpec) -> list[tuple[str, str, Any]]:
        """(JSON key, table label, value): what `lg inspect` shows of a ViT
        beyond the sizes every family has."""
        e = spec.extras
        return [("patch_size", "patch size", e.get("patch_size")), ("img_size", "image size", e.get("img_size")),
                ("in_chans", "channels", e.get("in_chans")), ("num_classes", "classes", e.get("num_classes")),
                ("prefix_tokens", "prefix tokens", e.get("prefix_tokens")),
                ("pooling", "pooling", e.get("global_pool"))]

    @staticmethod
    def owns_model(model: nn.Module) -> bool:
        return hasattr(model, "patch_embed") and hasattr(model, "blocks")

    @staticmethod
    def model_input(model: nn.Module) -> tuple[int, int]:
        """(channels, image size) a timm ViT takes."""
        patch_embed = model.patch_embed
        if getattr(patch_embed, "img_size", None) is not None:
            return int(patch_embed.proj.in_channels), int(patch_embed.img_size[0])
        channels, height, _ = model.pretrained_cfg["input_size"]
        return int(channels), int(height)

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        """A live ViT's sizes, for reports."""
        channels, image_size = self.model_input(model)
        blocks = model.blocks
        return {"depth": len(blocks), "width": int(getattr(model, "embed_dim", 0) or 0),
                "heads": int(blocks[0].attn.num_heads) if len(blocks) else 0,
                "patch_size": int(model.patch_embed.patch_size[0]), "img_size": image_size,
                "in_chans": channels, "num_classes": int(model.num_classes),
                "parameters": sum(p.numel() for p in model.parameters())}

    def input_size(self, spec: ArchSpec) -> tuple[int, int, int]:
        """(channels, height, width) of the images a model of this spec takes."""
        e = spec.extras
        return (int(e["in_chans"]), int(e["img_size"]), int(e["img_size"]))

    @staticmethod
    def no_weight_decay_roles() -> frozenset[str]:
        """Global roles timm's ViT exempts from weight decay (`no_weight_decay`)."""
        return frozenset({"pos_embed", "cls_token", "dist_token", "reg_token"})

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a recorded ``lg.config`` describes, and its stack on the
        meta device (every role's shape, no memory): read the same way as a
        checkpoint's, from the state dict of the model timm builds from it."""
        import timm

        config = check_config(config)
        args = {k: config[k] for k in CONFIG_KEYS if k in config}
        check_recorded_size(args, "the file's lg.config")
        name = config.get("model_name", PLAIN_MODEL_NAME)
        if name not in (PLAIN_MODEL_NAME, DISTILLED_MODEL_NAME):
            raise LgError(f"the file's lg.config names model {name!r}, not a timm ViT lg builds")
        try:
            with torch.device("meta"):
                model = timm.create_model(name, pretrained=False, **args)
        except (TypeError, ValueError, AssertionError, RuntimeError) as exc:
            raise LgError(f"the file's lg.config does not describe a timm ViT ({exc})".splitlines()[0]) from None
        return self.to_stack(model.state_dict(), config=args)

    def spec_of_model(self, model: nn.Module) -> dict[str, Any]:
        """The config that a live timm model was built with (heads, pooling, ...)."""
        if not hasattr(model, "blocks") or not hasattr(model, "patch_embed"):
            raise LgError(f"{type(model).__name__} is not a timm VisionTransformer")
        img_size = model.patch_embed.img_size
        return {
            "num_heads": model.blocks[0].attn.num_heads if len(model.blocks) else None,
            "global_pool": model.global_pool,
            "no_embed_class": bool(model.no_embed_class),
            "img_size": int(img_size[0]) if isinstance(img_size, (tuple, list)) else int(img_size),
            "init_values": _layer_scale_init(model),
        }


def _check_agreement(config: Mapping[str, Any], derived: Mapping[str, Any], where: str) -> None:
    """Each recorded field must say what the tensors say."""
    for key, value in config.items():
        if key not in derived or key in ("fc_norm", "init_values") and value is None:
            continue
        if key == "mlp_ratio":
            agrees = int(derived["embed_dim"] * value) == int(derived["embed_dim"] * derived["mlp_ratio"])
        elif key == "init_values":
            agrees = derived[key] is not None
        else:
            agrees = value == derived[key]
        if not agrees:
            raise LgError(f"{where} says {key} {json_shown(value)}, its tensors say "
                          f"{json_shown(derived[key])}")


def _layer_scale_init(model: nn.Module) -> float | None:
    block = model.blocks[0] if len(model.blocks) else None
    gamma = getattr(getattr(block, "ls1", None), "gamma", None)
    return 1e-5 if gamma is not None else None


def _mlp_ratio(width: int, mlp_dim: int) -> float:
    # timm builds the MLP with int(width * mlp_ratio): pick a ratio for which
    # that truncation gives exactly mlp_dim.
    ratio = mlp_dim / width
    if int(width * ratio) != mlp_dim:
        ratio = (mlp_dim + 0.5) / width
    return ratio


def _not_vit(found: str) -> str:
    return ("not a timm VisionTransformer checkpoint: expected blocks.N.{norm1,attn.qkv,attn.proj,"
            f"norm2,mlp.fc1,mlp.fc2}}, patch_embed.proj, pos_embed; {found}")

