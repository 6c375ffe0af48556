"""A Hugging Face family lg does not ship, whole: Meta's OPT (`OPTForCausalLM`,
`OPTModel`), declared as data and made an instance of `HfAdapter`, with one
hook (the width its embedding projection states). tests/test_hf_instances.py
registers it and reads, writes, resizes and loads it; it must stay at most
40 lines."""

from lgcli.arch.base import CAUSAL_LM, TEXT_ENCODER
from lgcli.arch.hf import HfAdapter
from lgcli.arch.hf_layout import Architecture, HfLayout
from lgcli.stack import EMBED, POSITIONS, VOCAB

OPT = HfLayout(
    family="opt", config_classes={"opt": "OPTConfig"}, base_prefix="model.", layers="decoder.layers",
    architectures={"OPTForCausalLM": Architecture(CAUSAL_LM, "AutoModelForCausalLM", prefixed=True),
                   "OPTModel": Architecture(TEXT_ENCODER, "AutoModel", prefixed=False)},
    layer_keys={"self_attn_layer_norm.weight": "norm1_weight", "self_attn_layer_norm.bias": "norm1_bias",
                "self_attn.q_proj.weight": "q", "self_attn.q_proj.bias": "q_bias",
                "self_attn.k_proj.weight": "k", "self_attn.k_proj.bias": "k_bias",
                "self_attn.v_proj.weight": "v", "self_attn.v_proj.bias": "v_bias",
                "self_attn.out_proj.weight": "o", "self_attn.out_proj.bias": "o_bias",
                "final_layer_norm.weight": "norm2_weight", "final_layer_norm.bias": "norm2_bias",
                "fc1.weight": "fc1", "fc1.bias": "fc1_bias", "fc2.weight": "fc2", "fc2.bias": "fc2_bias"},
    base_globals={"decoder.embed_tokens.weight": ("token_embed", (VOCAB, EMBED)),
                  # Learned positions, two rows past max_position_embeddings (OPT's offset).
                  "decoder.embed_positions.weight": ("pos_embed", (POSITIONS, EMBED)),
                  "decoder.final_layer_norm.weight": ("norm_weight", (EMBED,)),
                  "decoder.final_layer_norm.bias": ("norm_bias", (EMBED,))},
    head_globals={"lm_head.weight": ("lm_head", (VOCAB, EMBED))},
    tied_copies={"lm_head.weight": "decoder.embed_tokens.weight"},
    size_fields={"depth": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads",
                 "mlp_dim": "ffn_dim", "vocab": "vocab_size"},
    tied_head_input=("norm_weight", "norm_bias"),  # the final LayerNorm feeds the tied head
    # The embeddings' width, which OPT projects from when it is not the model's: kept the model's.
    write_sizes=lambda config, spec: config.update(word_embed_proj_dim=spec.width),
)
OPT_ADAPTER = HfAdapter(OPT)
