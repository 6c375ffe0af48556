"""timm SwinTransformer  <->  (ArchSpec with stages, Stack with stages),
declared as data (`timm_family.TimmFamily`, `timm_staged.TimmStages`) and
read by `timm_staged.StagedTimmAdapter`.

A Swin is a sequence of stages, each a canonical Stack of its own sizes
(``layers.{i}.blocks.{j}.*``: a timm ViT block without layer scale or q/k
norm, and a relative position table ((2W - 1)^2, heads) per block, its heads
following the stage's); the patch merging before stage i
(``layers.{i}.downsample``) is stage i's, the patch embedding the first
stage's, the final norm and head the last's (docs/methods.md "Models of
stages"). The heads and the window are read exactly from the tables; each
stage's window is the configured one clamped to its resolution, as timm
builds it. The image size is in no tensor: recorded by lg, else read off
what the tensors show of each stage's grid (`image_size`: its window, and
the attention masks older files carry), the largest size they allow (the
last stage one window: patch x window x 2^(stages - 1), 224 for every
Swin-T/S/B/L at window 7), said to be assumed unless it is the only one.

The original Microsoft layout (the merging at the end of a stage, the head
``head.*``) is renamed to timm's by `microsoft_layout`, as timm's swin
`checkpoint_filter_fn` does; lg writes timm's layout.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ..errors import LgError
from ..stack import CLASSES, EMBED, FIXED
from .declared import Layout
from .shapes import window_of_table
from .timm import BLOCK_KEYS as TIMM_BLOCK_KEYS, QKV_BIAS, QKV_ROLES, json_shown
from .timm_family import TimmFamily
from .timm_staged import TimmStages

TABLE = "attn.relative_position_bias_table"
LAYOUT = Layout(
    family="swin",
    layers="layers",  # the stages' root
    layer_keys={**{key: role for key, role in TIMM_BLOCK_KEYS.items()  # a ViT block's, less layer scale, q/k norms
                   if role not in ("ls1", "ls2") and "q_norm" not in key and "k_norm" not in key},
                TABLE: "rel_pos_bias"},
    fused_keys=QKV_ROLES,
    base_globals={
        "patch_embed.proj.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
        "patch_embed.proj.bias": ("patch_embed_bias", (EMBED,)),
        "patch_embed.norm.weight": ("patch_norm_weight", (EMBED,)),
        "patch_embed.norm.bias": ("patch_norm_bias", (EMBED,)),
        "norm.weight": ("norm_weight", (EMBED,)), "norm.bias": ("norm_bias", (EMBED,)),
        "head.fc.weight": ("head_weight", (CLASSES, EMBED)), "head.fc.bias": ("head_bias", (CLASSES,)),
    },
    ignored=(r"\.relative_position_index$", r"\.attn_mask$"),  # computed by timm; older checkpoints carry them
)


def arguments(globals_: Mapping[str, tuple[int, ...]], block: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """A Swin's arguments beyond the sizes, from the tensors' shapes (the
    first stage's window is the largest: timm only ever clamps it lower)."""
    patch = globals_.get("patch_embed.proj.weight")
    window = window_of_table(block[TABLE][0]) if TABLE in block else None
    if not (patch and len(patch) == 4 and patch[2] == patch[3] and "patch_embed.norm.weight" in globals_ and window):
        raise LgError("not a timm SwinTransformer checkpoint lg reads: it needs a square patch_embed.proj.weight, "
                      f"patch_embed.norm and {TABLE} tables of (2W - 1)^2 rows")
    stages = 1 + sum(key.endswith(".downsample.reduction.weight") for key in globals_)
    head = globals_.get("head.fc.weight")
    return {"patch_size": patch[2], "img_size": patch[2] * window * 2 ** (stages - 1), "window_size": window,
            "in_chans": patch[1], "num_classes": head[0] if head else 0, "qkv_bias": QKV_BIAS in block}


def windows(args: Mapping[str, Any], stages: int) -> list[int]:
    """Each stage's window as timm builds it: the configured one, clamped to
    the stage's resolution where smaller (the patch grid, image // patch as
    timm's PatchEmbed counts it, halved per stage, rounded up)."""
    return [min(int(args["window_size"]), -(-grid // 2 ** i))
            for grid in [int(args["img_size"]) // int(args["patch_size"])] for i in range(stages)]


# A shifted block's attention mask, which older timm and Microsoft's files carry: (windows, W^2, W^2).
MASK = re.compile(r"^layers\.([0-9]+)\.blocks\.[0-9]+\.attn_mask$")
# The largest patch grid searched for one that gives a file's windows.
MAX_GRID = 1 << 14


def image_size(args: Mapping[str, Any], tables: list[int],
               shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, Any], frozenset[str]] | None:
    """The image size of a file that does not record it (`TimmStages.settle`),
    from each stage's grid as the tensors show it: its window (`tables`: the
    configured window, clamped to a grid smaller than it) and, where the file
    carries them, its shifted blocks' masks (one per window of the grid padded
    to whole windows). Of the patch grids that give both, the largest (the
    last stage one window: patch x window x 2^(stages - 1) where no window is
    clamped and no mask bounds it); settled (not assumed) when it is the only
    one. None: no grid gives these windows."""
    patch, window, count = int(args["patch_size"]), int(args["window_size"]), len(tables)
    masks: dict[int, int] = {}
    for key, shape in shapes.items():
        found = MASK.match(key)
        if found and len(shape) == 3 and int(found.group(1)) < count:
            masks.setdefault(int(found.group(1)), int(shape[0]))
    # The largest grid: a clamped last stage is one window; a masked stage, at most its padded windows.
    bounds = [math.isqrt(n) * tables[i] * 2 ** i for i, n in masks.items()]
    if tables[-1] < window:
        bounds.append(tables[-1] * 2 ** (count - 1))
    if not bounds:
        return {}, frozenset()  # unbounded: `arguments`' size, whose last stage is one window, assumed

    def fits(grid: int) -> bool:
        sides = [-(-grid // 2 ** i) for i in range(count)]
        return windows({**args, "img_size": grid * patch}, count) == tables and all(
            sides[i] > tables[i] and (-(-sides[i] // tables[i])) ** 2 == n for i, n in masks.items())

    grids = [grid for grid in range(1, min(min(bounds), MAX_GRID) + 1) if fits(grid)]
    if not grids:
        return None
    return {"img_size": grids[-1] * patch}, frozenset({"img_size"} if len(grids) == 1 else ())


def live_arguments(model) -> dict[str, Any]:
    """A live Swin's image size and window (its first stage's: the
    configured one, or the same model's), refused unless square and average-pooled."""
    image = tuple(model.patch_embed.img_size)
    if image[0] != image[1] or model.global_pool != "avg":
        raise LgError(f"a timm Swin of image size {image} pooled by {json_shown(model.global_pool)}: lg reads "
                      f"square, average-pooled Swins")
    return {"window_size": int(model.layers[0].blocks[0].window_size[0]), "img_size": int(image[0])}


def microsoft_layout(state_dict: Mapping[str, Any]) -> dict[str, str]:
    """{timm's key: the Microsoft layout's} for a state dict in that layout
    (its sign: stage 0 has a merging, timm's never has; none for timm's):
    each merging to the stage after, the head under ``head.fc``."""
    if "layers.0.downsample.reduction.weight" not in state_dict:
        return {}
    renames = {}
    for key in state_dict:
        new = re.sub(r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m.group(1)) + 1}.downsample.", key)
        new = "head.fc." + key[len("head."):] if key.startswith("head.") else new
        if new != key:
            renames[new] = key
    return renames


SWIN = TimmFamily(layout=LAYOUT, model_name="swin_tiny_patch4_window7_224",
                  model_class="timm.models.swin_transformer.SwinTransformer", marker=f"layers.0.blocks.0.{TABLE}",
                  arguments=arguments, name="timm SwinTransformer", key_filter=microsoft_layout,
                  no_weight_decay=frozenset({"rel_pos_bias"}), assumed=frozenset({"img_size", "window_size"}),
                  hub_architectures=("swin_",), live_arguments=live_arguments)
SWIN_STAGES = TimmStages(last=frozenset({"norm.weight", "norm.bias", "head.fc.weight", "head.fc.bias"}),
                         windows=windows, guessed={"img_size": "image size assumed (the last stage one window)"},
                         settle=image_size,
                         filter_fn="timm.models.swin_transformer.checkpoint_filter_fn")
