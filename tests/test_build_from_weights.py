"""A Hugging Face model built from weights is built as from_pretrained builds
one: no random number is drawn for the weights the checkpoint replaces, and
every other tensor (the buffers transformers computes, the tied head) is
what transformers' own initialisation gives, so the model equals one
randomly initialised and then loaded, tensor for tensor, buffers included."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.overrides import TorchFunctionMode

from lgcli.arch import adapter_of_model

IMAGE = dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2)
TEXT = dict(vocab_size=40, hidden_size=32, num_attention_heads=4, intermediate_size=48)
# case -> (model class, config class, its arguments): one of each family lg
# reads, with the buffers each computes (rotary frequencies, BERT's position
# ids, GPT-2's, Swin's relative positions and masks) and tied heads.
MODELS = {
    "llama tied, grouped-query": ("LlamaForCausalLM", "LlamaConfig",
                                  dict(TEXT, num_hidden_layers=2, num_key_value_heads=2, tie_word_embeddings=True)),
    "llama untied": ("LlamaForCausalLM", "LlamaConfig", dict(TEXT, num_hidden_layers=2, tie_word_embeddings=False)),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(n_layer=2, n_embd=32, n_head=2, vocab_size=40, n_positions=16)),
    "bert": ("BertForMaskedLM", "BertConfig", dict(TEXT, num_hidden_layers=2, max_position_embeddings=16)),
    "vit": ("ViTForImageClassification", "ViTConfig", dict(IMAGE, intermediate_size=64, num_labels=3)),
    "deit": ("DeiTForImageClassificationWithTeacher", "DeiTConfig", dict(IMAGE, intermediate_size=64, num_labels=3)),
    "dinov2": ("Dinov2Model", "Dinov2Config", dict(IMAGE, mlp_ratio=2)),
    "dinov2 registers": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig",
                         dict(IMAGE, mlp_ratio=2, num_register_tokens=2)),
    "clip vision": ("CLIPVisionModel", "CLIPVisionConfig", dict(IMAGE, intermediate_size=64)),
    "swin": ("SwinForImageClassification", "SwinConfig",
             dict(embed_dim=16, depths=[1, 2], num_heads=[2, 4], image_size=32, patch_size=2, window_size=4,
                  num_labels=3)),
}


class RandomFills(TorchFunctionMode):
    """Records every in-place random fill (what torch's and transformers'
    initialisers do: `normal_`, `uniform_`, ...). A few constructors draw
    small tensors with torch.randn themselves (ViT's class token), which
    no loader can skip; those are not fills. Before lg built as
    from_pretrained does, every weight was filled and then overwritten."""

    FILLS = {"normal_", "uniform_", "bernoulli_", "exponential_", "random_", "cauchy_", "log_normal_", "geometric_"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # Fills of the meta device (a model built to ask its names) cost nothing.
        filled = next(a for a in [*args, *(kwargs or {}).values()] if isinstance(a, torch.Tensor)) \
            if getattr(func, "__name__", "") in self.FILLS else None
        if filled is not None and not filled.is_meta:
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


def source(case: str) -> torch.nn.Module:
    model_class, config_class, arguments = MODELS[case]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**arguments, architectures=[model_class])
    return getattr(transformers, model_class)(config).eval()


@pytest.mark.parametrize("case", sorted(MODELS))
def test_built_from_weights_draws_nothing_and_equals_the_source(case):
    model = source(case)
    adapter = adapter_of_model(model)
    spec, stack = adapter.to_stack(adapter.saved_state(model), config=adapter.spec_of_model(model))
    with RandomFills() as fills:
        built = adapter.load_model(spec, stack)
    assert fills.seen == []
    expected = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    found = dict(built.named_parameters(remove_duplicate=False)) | dict(built.named_buffers(remove_duplicate=False))
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(found[name], tensor), name
    # The head is tied where the source's is, and no loading flag is left behind.
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    for head, embedding in tied.items():
        assert built.get_parameter(head) is built.get_parameter(embedding)
    assert not [name for name, tensor in [*found.items(), *built.named_modules()]
                if "_is_hf_initialized" in tensor.__dict__]
