"""Hugging Face BERT (`BertForMaskedLM`, `BertModel`, and the
sentence-transformers layout of MiniLM-style encoders: BertModel keys at the
folder's root, with the pooling module's config beside)  <->  (ArchSpec, Stack).

Separate query/key/value, post-LayerNorm blocks (attention.output.LayerNorm
is norm1, output.LayerNorm norm2), learned positions and token types, an
embedding LayerNorm; the MLM head's transform (dense, LayerNorm) and its
vocabulary bias, the decoder tied to the word embeddings.
"""

from __future__ import annotations

import json
import re

from ..stack import EMBED, FIXED, POSITIONS, VOCAB, ArchSpec
from .base import MASKED_LM, TEXT_ENCODER
from .hf import HfAdapter
from .hf_layout import Architecture, HfLayout

# sentence-transformers' pooling module states the width it pools.
POOLING_CONFIG_SUFFIX = "_Pooling/config.json"
WIDTH_FIELD = re.compile(rb'("word_embedding_dimension"\s*:\s*)[0-9]+')


def rewrite_companion(name: str, data: bytes, spec: ArchSpec) -> bytes:
    """A sentence-transformers pooling config states the embedding width
    (`HfLayout.rewrite_companion`)."""
    if not name.endswith(POOLING_CONFIG_SUFFIX):
        return data
    try:
        config = json.loads(data)
    except ValueError:
        return data
    if not isinstance(config, dict) or config.get("word_embedding_dimension", spec.width) == spec.width:
        return data  # nothing to change: the file is copied byte for byte
    config["word_embedding_dimension"] = spec.width
    # Change the number alone, so that the rest of the file (its layout,
    # key order) stays the source's; re-serialise only when that is not
    # one clean substitution.
    edited, count = WIDTH_FIELD.subn(lambda m: m.group(1) + str(spec.width).encode(), data)
    try:
        if count == 1 and json.loads(edited) == config:
            return edited
    except ValueError:
        pass
    return (json.dumps(config, indent=2) + "\n").encode()


LAYOUT = HfLayout(
    family="bert",
    config_classes={"bert": "BertConfig"},
    base_prefix="bert.",
    layers="encoder.layer",
    architectures={
        "BertForMaskedLM": Architecture(MASKED_LM, "AutoModelForMaskedLM", prefixed=True),
        "BertModel": Architecture(TEXT_ENCODER, "AutoModel", prefixed=False),
    },
    layer_keys={
        "attention.self.query.weight": "q", "attention.self.query.bias": "q_bias",
        "attention.self.key.weight": "k", "attention.self.key.bias": "k_bias",
        "attention.self.value.weight": "v", "attention.self.value.bias": "v_bias",
        "attention.output.dense.weight": "o", "attention.output.dense.bias": "o_bias",
        "attention.output.LayerNorm.weight": "norm1_weight", "attention.output.LayerNorm.bias": "norm1_bias",
        "intermediate.dense.weight": "fc1", "intermediate.dense.bias": "fc1_bias",
        "output.dense.weight": "fc2", "output.dense.bias": "fc2_bias",
        "output.LayerNorm.weight": "norm2_weight", "output.LayerNorm.bias": "norm2_bias",
    },
    base_globals={
        "embeddings.word_embeddings.weight": ("token_embed", (VOCAB, EMBED)),
        "embeddings.position_embeddings.weight": ("pos_embed", (POSITIONS, EMBED)),
        "embeddings.token_type_embeddings.weight": ("token_type_embed", (FIXED, EMBED)),
        "embeddings.LayerNorm.weight": ("embed_norm_weight", (EMBED,)),
        "embeddings.LayerNorm.bias": ("embed_norm_bias", (EMBED,)),
        "pooler.dense.weight": ("pooler_weight", (EMBED, EMBED)),
        "pooler.dense.bias": ("pooler_bias", (EMBED,)),
    },
    head_globals={
        "cls.predictions.transform.dense.weight": ("head_transform_weight", (EMBED, EMBED)),
        "cls.predictions.transform.dense.bias": ("head_transform_bias", (EMBED,)),
        "cls.predictions.transform.LayerNorm.weight": ("head_norm_weight", (EMBED,)),
        "cls.predictions.transform.LayerNorm.bias": ("head_norm_bias", (EMBED,)),
        "cls.predictions.bias": ("lm_head_bias", (VOCAB,)),
        # The decoder: the word embeddings and cls.predictions.bias when the
        # config ties them (as it does by default), tensors of its own otherwise.
        "cls.predictions.decoder.weight": ("lm_head", (VOCAB, EMBED)),
        "cls.predictions.decoder.bias": ("lm_head_decoder_bias", (VOCAB,)),
    },
    tied_copies={"cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
                 "cls.predictions.decoder.bias": "cls.predictions.bias"},
    # A buffer older checkpoints saved.
    ignored=(r"embeddings\.position_ids$",),
    # The row counts of the lookup tables (a bare state dict's config takes them from the weights).
    table_sizes={"token_embed": "vocab_size", "pos_embed": "max_position_embeddings",
                 "token_type_embed": "type_vocab_size"},
    size_fields={"depth": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads",
                 "mlp_dim": "intermediate_size", "vocab": "vocab_size", "positions": "max_position_embeddings"},
    tied_head_input=("head_norm_weight", "head_norm_bias"),  # the transform's LayerNorm feeds the decoder
    post_norm=True,  # LayerNorm after each residual sum (attention.output.LayerNorm, output.LayerNorm)
    # The BoT paper's best wavelets for this family (bot.txt, "Choice of Wavelet Family"): --wavelet auto.
    bot_wavelets={"shrink": "haar", "grow": "bior6.8"},
    rewrite_companion=rewrite_companion,
)

# An instance, not a subclass: the family is its declaration.
BERT_ADAPTER = HfAdapter(LAYOUT)
