"""Hugging Face Llama, and the Mistral and Qwen2 layouts (`*ForCausalLM`,
`*Model`)  <->  (ArchSpec, Stack).

Separate q/k/v/o projections with grouped-query attention (k and v have
`num_key_value_heads` heads), a SwiGLU MLP ``down(silu(gate x) * up x)``
(gate, fc1 = up, fc2 = down), RMSNorm (weight only), RoPE (no position
tensor). Biases where the config has them: `attention_bias` (q, k, v, o),
`mlp_bias` (gate, up, down); Qwen2 always has q, k and v biases. The LM head
is tied to the token embedding or not (`tie_word_embeddings`).
"""

from __future__ import annotations

from typing import Any

from ..stack import EMBED, VOCAB, ArchSpec
from .base import CAUSAL_LM, TEXT_ENCODER
from .hf import HfAdapter
from .hf_layout import Architecture, HfLayout

_ARCHITECTURES = {}
for _name in ("Llama", "Mistral", "Qwen2"):
    _ARCHITECTURES[f"{_name}ForCausalLM"] = Architecture(CAUSAL_LM, "AutoModelForCausalLM", prefixed=True)
    _ARCHITECTURES[f"{_name}Model"] = Architecture(TEXT_ENCODER, "AutoModel", prefixed=False)


def write_sizes(config: dict[str, Any], spec: ArchSpec) -> None:
    """A head dimension apart from the width, and Qwen2's / Mistral's
    attention kind per layer, at the new depth (`HfLayout.write_sizes`)."""
    if "head_dim" in config or spec.head_dim * spec.heads != spec.width:
        config["head_dim"] = spec.head_dim
    types = config.get("layer_types")
    if isinstance(types, list) and types and len(types) != spec.depth:
        # Qwen2 / Mistral name each layer's attention (full or sliding):
        # layer j of the new depth takes the kind at its relative position.
        config["layer_types"] = [types[j * len(types) // spec.depth] for j in range(spec.depth)]


LAYOUT = HfLayout(
    family="llama",
    config_classes={"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config"},
    base_prefix="model.",
    layers="layers",
    architectures=_ARCHITECTURES,
    layer_keys={
        "input_layernorm.weight": "norm1_weight",
        "self_attn.q_proj.weight": "q", "self_attn.q_proj.bias": "q_bias",
        "self_attn.k_proj.weight": "k", "self_attn.k_proj.bias": "k_bias",
        "self_attn.v_proj.weight": "v", "self_attn.v_proj.bias": "v_bias",
        "self_attn.o_proj.weight": "o", "self_attn.o_proj.bias": "o_bias",
        "post_attention_layernorm.weight": "norm2_weight",
        "mlp.gate_proj.weight": "gate", "mlp.gate_proj.bias": "gate_bias",
        "mlp.up_proj.weight": "fc1", "mlp.up_proj.bias": "fc1_bias",
        "mlp.down_proj.weight": "fc2", "mlp.down_proj.bias": "fc2_bias",
    },
    base_globals={
        "embed_tokens.weight": ("token_embed", (VOCAB, EMBED)),
        "norm.weight": ("norm_weight", (EMBED,)),
    },
    head_globals={"lm_head.weight": ("lm_head", (VOCAB, EMBED))},
    # A tied LM head is the token embedding (no tensor of its own).
    tied_copies={"lm_head.weight": "embed_tokens.weight"},
    # Rotary frequencies that older checkpoints saved as a buffer.
    ignored=(r"\.rotary_emb\.inv_freq$",),
    # The row counts of the lookup tables (a bare state dict's config takes them from the weights).
    table_sizes={"token_embed": "vocab_size"},
    # RoPE: no tensor depends on max_position_embeddings, but it is how far the model reads (inspect shows it,
    # and lg refuses longer windows); a resize keeps it.
    size_fields={"depth": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads",
                 "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "mlp_dim": "intermediate_size",
                 "vocab": "vocab_size", "positions": "max_position_embeddings"},
    tied_head_input=("norm_weight",),  # the final RMSNorm feeds the head
    rms_norm=True,
    bot_wavelets={},  # the BoT paper chose none for Llama: haar both ways
    write_sizes=write_sizes,
)


# An instance, not a subclass: the family is its declaration.
LLAMA_ADAPTER = HfAdapter(LAYOUT)
