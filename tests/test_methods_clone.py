"""Function-preserving growth (SPEC.md "Baselines"): the grown model gives the
source's logits."""

from __future__ import annotations

import pytest
import torch

import lgcli
from lgcli.errors import LgError
from lgcli.methods.clone import insertion_plan
from lgcli.resize import resize_file

from conftest import VIT_VARIANTS, make_vit, sample_input

GROWTHS = {"width x2": dict(width=128), "depth +3": dict(depth=7), "both": dict(depth=6, width=192)}
VARIANTS = ["cls-token", "layer-scale", "register-tokens", "qk-norm", "avg-pool-no-cls",
            "cls-with-fc-norm", "distilled"]


# Every variant grows on both axes; each growth and placement on the plain ViT.
CASES = ([(variant, "both", "interleave") for variant in VARIANTS]
         + [("cls-token", growth, insert) for growth in GROWTHS for insert in ("interleave", "top")
            if (growth, insert) != ("both", "interleave")])


@pytest.mark.parametrize("variant, growth, insert", CASES, ids=["-".join(c) for c in CASES])
def test_grown_model_gives_the_source_logits(variant, growth, insert, tmp_path):
    sizes = GROWTHS[growth]
    overrides = dict(depth=4, embed_dim=64)
    if "num_heads" not in VIT_VARIANTS[variant]:
        overrides["num_heads"] = 2
    model = make_vit(variant, **overrides)
    x = sample_input(model)
    src, out = tmp_path / "src.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(model, src)
    resize_file(src, out, direction="grow", method="clone", insert=insert, **sizes)
    grown, spec = lgcli.load_model(out)
    assert spec.head_dim == model.blocks[0].attn.head_dim
    with torch.no_grad():
        expected, got = model(x), grown.eval()(x)
    assert torch.linalg.vector_norm(got - expected) <= 1e-4 * torch.linalg.vector_norm(expected)


def test_insertion_plan():
    # (source layer copied, is a new identity block) per target layer
    assert insertion_plan(4, 6, "interleave") == [(0, False), (1, False), (1, True), (2, False),
                                                  (3, False), (3, True)]
    assert insertion_plan(2, 5, "interleave") == [(0, False), (0, True), (1, False), (1, True), (1, True)]
    assert insertion_plan(3, 5, "top") == [(0, False), (1, False), (2, False), (2, True), (2, True)]


def test_new_blocks_have_zero_output_projections(tmp_path):
    src, out = tmp_path / "src.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(make_vit(depth=2, embed_dim=64, num_heads=2), src)
    report = resize_file(src, out, direction="grow", method="clone", depth=4)
    assert report["details"]["new_layers"] == [1, 3]
    stack, source = lgcli.load(out).stack, lgcli.load(src).stack
    for role in ("o", "o_bias", "fc2", "fc2_bias"):
        assert not stack.layers[role].data[[1, 3]].any()
    assert torch.equal(stack.layers["q"].data[1], source.layers["q"].data[0])


@pytest.mark.parametrize("variant, sizes, message", [
    ("pre-norm", dict(width=96, heads=3), "whole multiples on this model"),  # x1.5 into norm_pre
    ("cls-token", dict(width=128, heads=2), "keeps the head dim"),           # head dim 32 -> 64
])
def test_clone_refuses_what_it_cannot_preserve(variant, sizes, message, tmp_path):
    src = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit(variant, depth=2, embed_dim=64, num_heads=2), src)
    with pytest.raises(LgError, match=message):
        resize_file(src, tmp_path / "out.safetensors", direction="grow", method="clone", **sizes)
    assert not (tmp_path / "out.safetensors").exists()


def test_lg_grow_without_a_method_clones_where_clone_reaches_and_falls_back_to_auto_lg(tmp_path):
    """The grow default (docs/methods.md "Defaults"): clone where it reaches
    the size, so the logits are kept; auto-lg where it cannot (a ViT with
    norm_pre grown to 96, no multiple of 64), said in the report."""
    model = make_vit("pre-norm", depth=2, embed_dim=64, num_heads=2)
    x = sample_input(model)
    src = tmp_path / "src.safetensors"
    lgcli.save_model(model, src)
    report = resize_file(src, tmp_path / "wide.safetensors", direction="grow", depth=3, width=128)
    assert report["method"] == "clone"
    grown, _ = lgcli.load_model(tmp_path / "wide.safetensors")
    with torch.no_grad():
        expected, got = model(x), grown.eval()(x)
    assert torch.linalg.vector_norm(got - expected) <= 1e-4 * torch.linalg.vector_norm(expected)
    report = resize_file(src, tmp_path / "odd.safetensors", direction="grow", width=96, heads=3)
    assert report["method"] == "auto-lg"
    assert lgcli.inspect_checkpoint(tmp_path / "odd.safetensors")["provenance"][0]["method"] == "auto-lg"
