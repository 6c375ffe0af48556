"""Tiny Hugging Face text models for the text-family tests: every variant
lg reads, built from transformers' own config classes, with non-trivial
weights, saved as a model folder with tokenizer and generation files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import safe_open

VOCAB = 96
POSITIONS = 32
SEQ = 12


@dataclass(frozen=True)
class Variant:
    config_class: str
    model_class: str
    auto_class: str
    config: dict[str, Any]
    # A sentence-transformers folder: BertModel keys at the root, modules.json and 1_Pooling/.
    sentence_transformers: bool = False
    family: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_GPT2 = dict(n_layer=3, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=POSITIONS,
             bos_token_id=1, eos_token_id=2)
_LLAMA = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
              intermediate_size=48, vocab_size=VOCAB, max_position_embeddings=POSITIONS,
              bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
_BERT = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64,
             vocab_size=VOCAB, max_position_embeddings=POSITIONS, type_vocab_size=2, pad_token_id=0)

VARIANTS: dict[str, Variant] = {
    "bert-model": Variant("BertConfig", "BertModel", "AutoModel", _BERT, family="bert"),
    "bert-mlm": Variant("BertConfig", "BertForMaskedLM", "AutoModelForMaskedLM", _BERT, family="bert"),
    "bert-sentence-transformers": Variant("BertConfig", "BertModel", "AutoModel",
                                          {**_BERT, "num_attention_heads": 4}, sentence_transformers=True,
                                          family="bert"),
    "gpt2-lm": Variant("GPT2Config", "GPT2LMHeadModel", "AutoModelForCausalLM", _GPT2, family="gpt2"),
    "gpt2-explicit-inner": Variant("GPT2Config", "GPT2LMHeadModel", "AutoModelForCausalLM",
                                   {**_GPT2, "n_inner": 4 * _GPT2["n_embd"]}, family="gpt2"),
    "gpt2-model": Variant("GPT2Config", "GPT2Model", "AutoModel", {**_GPT2, "n_inner": 48}, family="gpt2"),
    "llama-mha": Variant("LlamaConfig", "LlamaForCausalLM", "AutoModelForCausalLM", _LLAMA, family="llama"),
    "llama-gqa": Variant("LlamaConfig", "LlamaForCausalLM", "AutoModelForCausalLM",
                         {**_LLAMA, "num_key_value_heads": 2}, family="llama"),
    "llama-tied": Variant("LlamaConfig", "LlamaForCausalLM", "AutoModelForCausalLM",
                          {**_LLAMA, "num_key_value_heads": 2, "tie_word_embeddings": True}, family="llama"),
    "llama-model": Variant("LlamaConfig", "LlamaModel", "AutoModel", {**_LLAMA, "num_key_value_heads": 1},
                           family="llama"),
    "llama-biases": Variant("LlamaConfig", "LlamaForCausalLM", "AutoModelForCausalLM",
                            {**_LLAMA, "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 2},
                            family="llama"),
    # head_dim given apart from the width (Mistral-Nemo, Qwen3 do this): q is 4 x 16 = 64 rows over a 32 width.
    "llama-head-dim": Variant("LlamaConfig", "LlamaForCausalLM", "AutoModelForCausalLM",
                              {**_LLAMA, "head_dim": 16, "num_key_value_heads": 2}, family="llama"),
    "qwen2": Variant("Qwen2Config", "Qwen2ForCausalLM", "AutoModelForCausalLM",
                     {**_LLAMA, "num_key_value_heads": 2, "tie_word_embeddings": True}, family="llama"),
    "mistral": Variant("MistralConfig", "MistralForCausalLM", "AutoModelForCausalLM",
                       {**_LLAMA, "num_key_value_heads": 2, "sliding_window": 8}, family="llama"),
}


def make_model(variant: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny model of `variant` whose every parameter is random and
    non-trivial: norm gains away from 1 and biases away from 0, so that a
    wrongly mapped norm or bias changes the outputs."""
    v = VARIANTS[variant]
    config = getattr(transformers, v.config_class)(**{**v.config, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, v.model_class)(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1 and ("norm" in name.lower() or name.endswith("ln_1.weight")
                                     or name.endswith("ln_2.weight") or name.endswith("ln_f.weight")):
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param) if param.dim() == 1 else
                            param + 0.05 * torch.randn_like(param))
    return model.eval()


def make_tokenizer_json(vocab: int = VOCAB) -> bytes:
    """A real tokenizer.json (a word-level tokenizer of `vocab` tokens), made by `tokenizers`."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = {"[UNK]": 0, **{f"w{i}": i for i in range(1, vocab)}}
    tokenizer = Tokenizer(WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    return tokenizer.to_str().encode()


def companion_files(variant: str, width: int) -> dict[str, bytes]:
    """The tokenizer (and sentence-transformers) files a real folder carries."""
    v = VARIANTS[variant]
    files = {"tokenizer.json": make_tokenizer_json(),
             "tokenizer_config.json": json.dumps({"model_max_length": POSITIONS, "unk_token": "[UNK]"}).encode(),
             "special_tokens_map.json": b'{"unk_token": "[UNK]"}\n'}
    if v.family == "bert":
        files["vocab.txt"] = ("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                        + [f"w{i}" for i in range(5, VOCAB)]) + "\n").encode()
    if v.sentence_transformers:
        files["modules.json"] = json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ], indent=2).encode()
        files["sentence_bert_config.json"] = b'{"max_seq_length": 32, "do_lower_case": false}\n'
        files["config_sentence_transformers.json"] = b'{"__version__": {"sentence_transformers": "2.2.2"}}\n'
        files["1_Pooling/config.json"] = json.dumps({
            "word_embedding_dimension": width, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}, indent=4).encode()
    return files


def save_folder(model: torch.nn.Module, folder: Path, variant: str, **kwargs) -> Path:
    """save_pretrained, then the tokenizer files beside it."""
    model.save_pretrained(folder, **kwargs)
    for name, data in companion_files(variant, model.config.hidden_size).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def token_ids(seed: int = 3, batch: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, SEQ), generator=generator)


def outputs(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The model's main output: logits, or the last hidden state of a base model."""
    with torch.no_grad():
        out = model(input_ids=ids)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def load_strict(folder: Path, variant: str):
    """from_pretrained with its loading report; asserts nothing went missing,
    was unexpected or mismatched (or failed)."""
    auto = getattr(transformers, VARIANTS[variant].auto_class)
    model, info = auto.from_pretrained(folder, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"{folder}: {problems}"
    assert type(model).__name__ == VARIANTS[variant].model_class
    return model.eval()


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model folder (one file or shards)."""
    files = sorted(p for p in os.listdir(folder) if p.endswith(".safetensors"))
    out = {}
    for name in files:
        with safe_open(str(folder / name), "pt") as f:
            for key in f.keys():
                out[key] = f.get_tensor(key)
    return out


def metadata(folder: Path) -> dict[str, str]:
    name = "model.safetensors" if (folder / "model.safetensors").exists() else sorted(
        p for p in os.listdir(folder) if p.endswith(".safetensors"))[0]
    with safe_open(str(folder / name), "pt") as f:
        return f.metadata() or {}


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).norm() / expected.norm())


class Sources:
    """Source folders built once per (variant, sizes) in a test module."""

    def __init__(self, root_factory) -> None:
        self._factory = root_factory
        self._cache: dict[tuple, tuple[Path, torch.nn.Module]] = {}

    def __call__(self, variant: str, **overrides) -> tuple[Path, torch.nn.Module]:
        key = (variant, tuple(sorted(overrides.items())))
        if key not in self._cache:
            model = make_model(variant, **overrides)
            folder = save_folder(model, self._factory.mktemp(variant), variant)
            self._cache[key] = folder, model
        return self._cache[key]
