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
from .base import CAUSAL_LM, LAYER_SOURCES, TEXT_ENCODER
from .hf import HfAdapter
from .hf_layout import Architecture, HfLayout

_ARCHITECTURES = {}
for _name in ("Llama", "Mistral", "Qwen2"):
    _ARCHITECTURES[f"{_name}ForCausalLM"] = Architecture(CAUSAL_LM, "AutoModelForCausalLM", prefixed=True)
    _ARCHITECTURES[f"{_name}Model"] = Architecture(TEXT_ENCODER, "AutoModel", prefixed=False)


# Qwen2's and Mistral's attention kinds (config.json's layer_types), and the fields of Qwen2's older rule that
# makes them where a config states none: layers from max_window_layers on slide, when use_sliding_window sets a
# window (transformers 5 reads the rule only then; layer_types, where stated, is what its models follow).
FULL, SLIDING = "full_attention", "sliding_attention"
KINDS, WINDOW_FROM, WINDOW_ON, WINDOW = "layer_types", "max_window_layers", "use_sliding_window", "sliding_window"


def write_sizes(config: dict[str, Any], spec: ArchSpec) -> None:
    """A head dimension apart from the width, and Qwen2's / Mistral's
    attention kind per layer, at the new depth, with Qwen2's
    max_window_layers agreeing with them (`HfLayout.write_sizes`)."""
    if "head_dim" in config or spec.head_dim * spec.heads != spec.width:
        config["head_dim"] = spec.head_dim
    kinds = attention_kinds(config, spec)
    if kinds is None or kinds == config.get(KINDS):
        return
    config[KINDS] = kinds
    if WINDOW_FROM in config and windowed(config):
        full = kinds.count(FULL)
        if kinds == [FULL] * full + [SLIDING] * (len(kinds) - full):
            config[WINDOW_FROM] = full  # the rule makes these very kinds
        else:
            # No count states an interleaving (a stack's F F S S F F S S): layer_types alone says it, as a
            # count left behind would say other kinds to whoever reads the rule.
            del config[WINDOW_FROM]


def attention_kinds(config: dict[str, Any], spec: ArchSpec) -> list[str] | None:
    """Each layer's attention kind: that of the source layer it holds, where the resize recorded one
    (`base.with_layer_sources`), so that a copied layer attends as it did (a sliding layer kept is still a
    sliding one, and a grow that keeps the function keeps it). An identity block (clone, identity-insert)
    holds the layer it follows: while its output projections are zero its kind changes nothing, and once
    training moves them it computes that layer's features over that layer's span. A layer that holds no one
    layer (BoT's and tleg-fit's blends, heur-lg's and auto-lg's random layers, a learngene's) takes the kind
    at its relative position among the source's, the nearest layer to where it sits. None where the config
    states no kinds."""
    record = spec.extras.get(LAYER_SOURCES)
    if record is None or len(record[1]) != spec.depth:  # none, or one left from another depth: relative
        record = None
    stated = config.get(KINDS)
    if not (isinstance(stated, list) and stated):
        # A config without layer_types (transformers 4's Qwen2): its rule's kinds at the source's depth.
        stated = window_rule(config, record[0]) if record else None
        if stated is None:
            return None
    described, held = record or (len(stated), [None] * spec.depth)
    source = [stated[i * len(stated) // described] for i in range(described)]
    return [source[j * described // spec.depth if i is None else i] for j, i in enumerate(held)]


def windowed(config: dict[str, Any]) -> bool:
    """Whether Qwen2's rule gives any layer a window (else every layer is full, whatever its count)."""
    return bool(config.get(WINDOW_ON)) and config.get(WINDOW) is not None


def window_rule(config: dict[str, Any], depth: int) -> list[str] | None:
    """The kinds Qwen2's rule makes for `depth` layers (None where the config does not use the rule)."""
    start = config.get(WINDOW_FROM)
    if not windowed(config) or type(start) is not int:
        return None
    return [SLIDING if i >= start else FULL for i in range(depth)]


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
