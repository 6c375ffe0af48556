"""Hugging Face GPT-2 (`GPT2LMHeadModel`, `GPT2Model`)  <->  (ArchSpec, Stack).

GPT-2's linear layers are `Conv1D`s, stored (in, out): they are transposed on
read and write. q, k and v are fused as the output columns of `attn.c_attn`
(D, 3D), in that order. LayerNorms (weight and bias), learned positions,
and an LM head tied to the token embedding (no tensor of its own).
"""

from __future__ import annotations

from ..stack import EMBED, POSITIONS, VOCAB
from .base import CAUSAL_LM, TEXT_ENCODER
from .hf import HfAdapter
from .hf_layout import Architecture, HfLayout

LAYOUT = HfLayout(
    family="gpt2",
    config_classes={"gpt2": "GPT2Config"},
    base_prefix="transformer.",
    layers="h",
    architectures={
        "GPT2LMHeadModel": Architecture(CAUSAL_LM, "AutoModelForCausalLM", prefixed=True),
        "GPT2Model": Architecture(TEXT_ENCODER, "AutoModel", prefixed=False),
    },
    layer_keys={
        "ln_1.weight": "norm1_weight", "ln_1.bias": "norm1_bias",
        "attn.c_proj.weight": "o", "attn.c_proj.bias": "o_bias",
        "ln_2.weight": "norm2_weight", "ln_2.bias": "norm2_bias",
        "mlp.c_fc.weight": "fc1", "mlp.c_fc.bias": "fc1_bias",
        "mlp.c_proj.weight": "fc2", "mlp.c_proj.bias": "fc2_bias",
    },
    fused_keys={"attn.c_attn.weight": ("q", "k", "v"), "attn.c_attn.bias": ("q_bias", "k_bias", "v_bias")},
    transposed=frozenset({"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}),
    base_globals={
        "wte.weight": ("token_embed", (VOCAB, EMBED)),
        "wpe.weight": ("pos_embed", (POSITIONS, EMBED)),
        "ln_f.weight": ("norm_weight", (EMBED,)),
        "ln_f.bias": ("norm_bias", (EMBED,)),
    },
    head_globals={"lm_head.weight": ("lm_head", (VOCAB, EMBED))},
    # A tied LM head is the token embedding (no tensor of its own).
    tied_copies={"lm_head.weight": "wte.weight"},
    # The causal-mask buffers older checkpoints (the original gpt2 upload) carry.
    ignored=(r"\.attn\.(masked_)?bias$",),
    # The row counts of the lookup tables (a bare state dict's config takes them from the weights).
    table_sizes={"token_embed": "vocab_size", "pos_embed": "n_positions"},
    size_fields={"width": "n_embd", "mlp_dim": "n_inner", "depth": "n_layer", "heads": "n_head",
                 "vocab": "vocab_size", "positions": "n_positions"},
    optional_sizes=frozenset({"mlp_dim", "vocab", "positions"}),
    implicit_mlp_ratio=4,  # n_inner None: 4 x width
    tied_head_input=("norm_weight", "norm_bias"),  # ln_f feeds the head
    # The BoT paper's best wavelets for this family (bot.txt, "Choice of Wavelet Family"): --wavelet auto.
    bot_wavelets={"shrink": "coif3", "grow": "db2"},
)

# An instance, not a subclass: the family is its declaration.
GPT2_ADAPTER = HfAdapter(LAYOUT)
