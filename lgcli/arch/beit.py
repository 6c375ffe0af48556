"""timm BEiT (`timm.models.beit.Beit`)  <->  (ArchSpec, Stack), declared as
data and read by `timm_family.TimmAdapter`.

A BEiT block is a ViT block with its own attention biases and position
bias: fused ``attn.qkv`` without a bias, a query and a value bias of their
own (the key's is zero, a buffer timm computes), a relative position bias
table per block, ((2W - 1)^2 + 3, heads) for the W x W patch grid and the
class token, and layer scale as ``gamma_1``/``gamma_2``. Its heads are the
tables' columns, its image size their window times the patch.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import LgError
from ..stack import CLASSES, EMBED, FIXED, TOKENS
from .declared import Layout
from .shapes import window_of_table
from .timm_family import TimmFamily

TABLE = "attn.relative_position_bias_table"
LAYOUT = Layout(
    family="beit",
    layers="blocks",
    layer_keys={TABLE: "rel_pos_bias", "gamma_1": "ls1", "gamma_2": "ls2",
                "norm1.weight": "norm1_weight", "norm1.bias": "norm1_bias",
                "attn.q_bias": "q_bias", "attn.v_bias": "v_bias",
                "attn.proj.weight": "o", "attn.proj.bias": "o_bias",
                "norm2.weight": "norm2_weight", "norm2.bias": "norm2_bias",
                "mlp.fc1.weight": "fc1", "mlp.fc1.bias": "fc1_bias", "mlp.fc2.weight": "fc2", "mlp.fc2.bias": "fc2_bias"},
    fused_keys={"attn.qkv.weight": ("q", "k", "v")},
    base_globals={
        "cls_token": ("cls_token", (FIXED, FIXED, EMBED)),
        "pos_embed": ("pos_embed", (FIXED, TOKENS, EMBED)),
        "patch_embed.proj.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
        "patch_embed.proj.bias": ("patch_embed_bias", (EMBED,)),
        "norm.weight": ("norm_weight", (EMBED,)), "norm.bias": ("norm_bias", (EMBED,)),
        "fc_norm.weight": ("fc_norm_weight", (EMBED,)), "fc_norm.bias": ("fc_norm_bias", (EMBED,)),
        "head.weight": ("head_weight", (CLASSES, EMBED)), "head.bias": ("head_bias", (CLASSES,)),
    },
    ignored=(r"\.relative_position_index$",),  # computed by timm; older checkpoints carry it
)


def arguments(globals_: Mapping[str, tuple[int, ...]], block: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Beit's arguments beyond the sizes, from the tensors' shapes."""
    patch = globals_.get("patch_embed.proj.weight")
    window = window_of_table(block[TABLE][0], extra=3) if TABLE in block else None
    if patch is None or len(patch) != 4 or patch[2] != patch[3] or window is None:
        raise LgError("not a timm BEiT checkpoint lg reads: it needs a square patch_embed.proj.weight and "
                      f"{TABLE} tables of (2W - 1)^2 + 3 rows")
    head = globals_.get("head.weight")
    return {"img_size": window * patch[2], "patch_size": patch[2], "in_chans": patch[1],
            "num_classes": head[0] if head else 0, "use_abs_pos_emb": "pos_embed" in globals_,
            "use_rel_pos_bias": True, "qkv_bias": "attn.q_bias" in block,
            # Layer scale's starting value shapes a random model only (the registered base's).
            "init_values": 0.1 if "gamma_1" in block else None, "use_fc_norm": "fc_norm.weight" in globals_}


BEIT = TimmFamily(layout=LAYOUT, model_name="beit_base_patch16_224", model_class="timm.models.beit.Beit",
                  marker=f"blocks.0.{TABLE}", arguments=arguments, name="timm BEiT",
                  no_weight_decay=frozenset({"pos_embed", "cls_token", "rel_pos_bias"}),
                  assumed=frozenset({"init_values"}))
