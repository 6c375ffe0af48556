"""One way to count a model's parameters and bound a resize's memory, for
every family (`lgcli.arch.shapes.ModelShapes`): the shapes a family says its
library builds for a spec are exactly the state dict of the library's model,
the count is its parameters, and the largest role stack is the one the
stack read from that model holds."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import transformers

from lgcli.arch import get_adapter
from lgcli.arch.declared import Layout
from lgcli.arch.shapes import LayerShapes, ModelShapes

SWIN = dict(embed_dim=16, depths=(2, 2), num_heads=(2, 4), img_size=32, patch_size=2, window_size=4, num_classes=5)
HF_SWIN = dict(embed_dim=16, depths=[1, 2, 1], num_heads=[2, 4, 8], image_size=32, patch_size=2, window_size=4,
               num_labels=3)
HF_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
              patch_size=8, num_labels=4)


def timm_vit(**kwargs):
    return timm.create_model("vit_base_patch16_224", pretrained=False, depth=2, embed_dim=32, num_heads=2,
                             img_size=32, patch_size=8, num_classes=4, **kwargs)


# family -> (the library's model, the config its state dict is read with)
MODELS = {
    "vit plain": ("vit", lambda: timm_vit(), lambda m: None),
    "vit layer scale, q/k norm": ("vit", lambda: timm_vit(init_values=0.1, qk_norm=True, qkv_bias=False),
                                  lambda m: None),
    "vit registers, no class token": ("vit", lambda: timm_vit(class_token=False, reg_tokens=2, global_pool="avg"),
                                      lambda m: None),
    "swin two stages": ("swin", lambda: timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **SWIN),
                        lambda m: {"img_size": 32}),
    "swin no classes": ("swin", lambda: timm.create_model("swin_tiny_patch4_window7_224", pretrained=False,
                                                          **{**SWIN, "num_classes": 0, "depths": (1, 2, 1),
                                                             "num_heads": (2, 4, 8)}),
                        lambda m: {"img_size": 32}),
    "beit": ("beit", lambda: timm.create_model("beit_base_patch16_224", pretrained=False, depth=2, embed_dim=32,
                                               num_heads=2, img_size=32, patch_size=8, num_classes=4),
             lambda m: None),
    "beit absolute positions, no layer scale": ("beit", lambda: timm.create_model(
        "beit_base_patch16_224", pretrained=False, depth=2, embed_dim=32, num_heads=2, img_size=32, patch_size=8,
        num_classes=0, use_abs_pos_emb=True, init_values=None, use_fc_norm=False), lambda m: None),
    "hf-swin classifier": ("hf-swin", lambda: transformers.SwinForImageClassification(transformers.SwinConfig(
        **HF_SWIN, architectures=["SwinForImageClassification"])), lambda m: m.config.to_dict()),
    "hf-swin features": ("hf-swin", lambda: transformers.SwinModel(transformers.SwinConfig(
        **HF_SWIN, architectures=["SwinModel"])), lambda m: m.config.to_dict()),
    "hf-vit": ("hf-vit", lambda: transformers.ViTForImageClassification(transformers.ViTConfig(
        **HF_VIT, architectures=["ViTForImageClassification"])), lambda m: m.config.to_dict()),
    "gpt2": ("gpt2", lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=16, architectures=["GPT2LMHeadModel"])),
        lambda m: m.config.to_dict()),
}


@pytest.mark.parametrize("case", sorted(MODELS))
def test_the_shapes_are_the_librarys_model(case):
    family, make, config_of = MODELS[case]
    torch.manual_seed(0)
    model = make()
    adapter = get_adapter(family)
    saved = adapter.saved_state(model)
    spec, stack = adapter.to_stack(saved, config=config_of(model))
    shapes = adapter.model_shapes(spec)
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})  # a tied head is saved once
    assert shapes.state() == {key: tuple(tensor.shape) for key, tensor in saved.items() if key not in tied}
    assert adapter.parameter_count(spec) == sum(p.numel() for p in model.parameters())
    assert adapter.largest_role_elements(spec) == stack.largest_role_elements()


def test_counted_by_hand():
    """Two layers of a fused (2 + 2, 3) tensor and a (3,) one, and a (5, 3) global."""
    layout = Layout(family="toy", layers="blocks", layer_keys={"norm.weight": "norm1_weight"},
                    fused_keys={"qk.weight": ("q", "k")}, base_globals={})
    shapes = ModelShapes((LayerShapes(layout, "m.", 2, {"qk.weight": (4, 3), "norm.weight": (3,)}),),
                         {"head.weight": (5, 3)})
    assert shapes.state() == {"head.weight": (5, 3), "m.blocks.0.qk.weight": (4, 3), "m.blocks.0.norm.weight": (3,),
                              "m.blocks.1.qk.weight": (4, 3), "m.blocks.1.norm.weight": (3,)}
    assert shapes.parameter_count() == 2 * (12 + 3) + 15
    # q is half the fused rows over 2 layers: 2 * 6 = 12 < the head's 15.
    assert shapes.largest_role_elements() == 15
    assert ModelShapes.of_state(shapes.state(), [(layout, "m.")]) == shapes
    wide = ModelShapes((LayerShapes(layout, "", 8, {"qk.weight": (4, 3)}),), {"head.weight": (5, 3)})
    assert wide.largest_role_elements() == 8 * 6 == math.prod((8, 2, 3))
