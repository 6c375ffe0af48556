"""A timm family is data (`lgcli.arch.timm_family.TimmFamily`): the
registered model timm builds and its class, the key of each role, the
model's arguments read from the tensors' shapes. A test family declared
here in a few lines (timm's plain VisionTransformer) is read and written
back bit for bit by the one timm adapter, counted as timm counts it, and
resized by select, bot and clone into models timm loads strictly (clone
keeping the logits). tests/test_timm_family_beit.py does the same for a
real family lg reads this way (BEiT)."""

from __future__ import annotations

import dataclasses

import pytest
import timm
import torch

from lgcli.arch import ADAPTERS, register, unregister
from lgcli.arch.declared import Layout, memory_reader
from lgcli.arch.timm import BLOCK_KEYS, QKV_ROLES
from lgcli.arch.timm_family import TimmAdapter, TimmFamily
from lgcli.methods import get_method, resolve_options
from lgcli.methods.common import MethodContext
from lgcli.stack import CLASSES, EMBED, FIXED, TOKENS


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter off its initial value, so that a tensor read into the wrong role shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    return model.eval()


def images(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32)  # float32: equal bits, not merely equal values


def tiny_vit() -> torch.nn.Module:
    return perturbed(timm.create_model("vit_base_patch16_224", pretrained=False, depth=2, embed_dim=32,
                                       num_heads=2, img_size=32, patch_size=8, num_classes=4))


# A test family: timm's plain VisionTransformer declared on the same adapter
# (its blocks' keys are timm's shared ones), in the lines below.
TEST_LAYOUT = Layout(family="test-timm-vit", layers="blocks", layer_keys=BLOCK_KEYS, fused_keys=QKV_ROLES,
                     base_globals={"cls_token": ("cls_token", (FIXED, FIXED, EMBED)),
                                   "pos_embed": ("pos_embed", (FIXED, TOKENS, EMBED)),
                                   "patch_embed.proj.weight": ("patch_embed_weight", (EMBED, FIXED, FIXED, FIXED)),
                                   "patch_embed.proj.bias": ("patch_embed_bias", (EMBED,)),
                                   "norm.weight": ("norm_weight", (EMBED,)), "norm.bias": ("norm_bias", (EMBED,)),
                                   "head.weight": ("head_weight", (CLASSES, EMBED)),
                                   "head.bias": ("head_bias", (CLASSES,))})
TEST_FAMILY = TimmFamily(
    layout=TEST_LAYOUT, model_name="vit_base_patch16_224",
    model_class="timm.models.vision_transformer.VisionTransformer", marker="blocks.0.attn.qkv.weight",
    name="test timm ViT",
    arguments=lambda globals_, block: {"img_size": 32, "patch_size": globals_["patch_embed.proj.weight"][2],
                                       "in_chans": 3, "num_classes": globals_["head.weight"][0]})


@pytest.fixture
def test_family():
    adapter = TimmAdapter(TEST_FAMILY)
    register(adapter)
    yield adapter
    unregister("test-timm-vit")


@pytest.mark.parametrize("lazy", [False, True], ids=["in-memory", "lazy"])
def test_a_declared_test_family_round_trips_bit_for_bit(test_family, lazy):
    assert ADAPTERS["test-timm-vit"] is test_family
    model = tiny_vit()
    state = model.state_dict()
    spec, stack = test_family.to_stack(state, heads=2, reader=memory_reader(state) if lazy else None)
    assert stack.lazy == lazy and (spec.depth, spec.width, spec.heads) == (2, 32, 2)
    written = test_family.from_stack(spec, stack)
    assert sorted(written) == sorted(state)
    for key, tensor in state.items():
        assert torch.equal(bits(written[key]), bits(tensor)), key
    assert test_family.parameter_count(spec) == sum(p.numel() for p in model.parameters())
    loaded = test_family.load_model(spec, stack)  # timm's model, loaded strictly
    x = images()
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), model(x))


@pytest.mark.parametrize("method,direction,depth,width", [("select", "shrink", 1, 16), ("bot", "shrink", 1, 32),
                                                          ("clone", "grow", 2, 64), ("bot", "grow", 3, 32)])
def test_the_test_family_resizes_into_models_timm_loads_strictly(test_family, method, direction, depth, width):
    model = tiny_vit()
    spec, stack = test_family.to_stack(model.state_dict(), heads=2)
    target = spec.with_sizes(depth=depth, width=width, heads=width // 16, mlp_dim=4 * width)
    chosen = get_method(method)
    result = chosen.run(stack, spec, target, resolve_options(chosen, {}), MethodContext(direction=direction, seed=0))
    test_family.check_loadable(target, test_family.from_stack(target, result.stack))
    resized = test_family.load_model(target, result.stack).eval()  # load_state_dict(strict=True)
    x = images()
    with torch.no_grad():
        logits = resized(x)
        assert logits.shape == (2, 4) and torch.isfinite(logits).all()
        if method == "clone":
            assert torch.allclose(logits, model(x), atol=1e-5, rtol=0)


def test_a_key_filter_reads_another_layout_as_timm_names_it():
    """The filter (timm's checkpoint_filter_fn's role) renames keys without
    reading a tensor: a file whose head is `classifier.*` is read, lazily,
    as timm's `head.*` and written under timm's names."""
    renaming = dataclasses.replace(TEST_FAMILY, key_filter=lambda state: {
        "head" + key[len("classifier"):]: key for key in state if key.startswith("classifier.")})
    adapter = TimmAdapter(renaming)
    model = tiny_vit()
    state = {("classifier" + k[len("head"):] if k.startswith("head.") else k): v for k, v in model.state_dict().items()}
    asked = []

    def reader(key, out, start):
        asked.append(key)
        memory_reader(state)(key, out, start)

    spec, stack = adapter.to_stack(state, heads=2, reader=reader)
    written = adapter.from_stack(spec, stack)
    assert sorted(written) == sorted(model.state_dict())
    assert torch.equal(written["head.weight"], state["classifier.weight"])
    assert "classifier.weight" in asked and "head.weight" not in asked  # read from the file's own name


def test_hub_folders_are_the_adapters_for_any_family_that_names_their_architectures(tmp_path):
    """A real family's declaration (BEiT's) with `hub_architectures` reads
    what timm's save_for_hf writes, as the model timm builds of its
    config.json, and writes a resize of it as a hub folder timm's local-dir
    loader loads strictly; the same declaration without them, or a folder of
    another architecture, is not claimed."""
    import json

    from safetensors.torch import save_file
    from timm.models import save_for_hf

    from lgcli.arch.beit import BEIT

    adapter = TimmAdapter(dataclasses.replace(BEIT, hub_architectures=("beit",)))
    model = perturbed(timm.create_model("beit_base_patch16_224", pretrained=False, depth=2, embed_dim=64,
                                        num_heads=4, img_size=32, patch_size=8, num_classes=4))
    save_for_hf(model, str(tmp_path / "hub"), safe_serialization=True)
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    assert adapter.recognises_config(config) and not TimmAdapter(BEIT).recognises_config(config)
    assert not adapter.recognises_config({**config, "architecture": "vit_base_patch16_224"})
    spec, stack = adapter.to_stack(model.state_dict(), config=config)
    assert (spec.depth, spec.width, spec.heads, spec.heads_assumed) == (2, 64, 4, False)
    target = spec.with_sizes(depth=1, width=32, heads=2, mlp_dim=128)
    chosen = get_method("select")
    result = chosen.run(stack, spec, target, resolve_options(chosen, {}), MethodContext(direction="shrink", seed=0))
    out = tmp_path / "out"
    out.mkdir()
    save_file(adapter.from_stack(target, result.stack), str(out / "model.safetensors"))
    written = adapter.folder_config(target)
    assert {k: written["model_args"][k] for k in ("depth", "embed_dim", "num_heads")} == {
        "depth": 1, "embed_dim": 32, "num_heads": 2}
    (out / "config.json").write_text(json.dumps(written))
    assert adapter.load_call(target, str(out)) == f"timm.create_model('local-dir:{out}', pretrained=True)"
    loaded = timm.create_model(f"local-dir:{out}", pretrained=True).eval()  # loads strictly
    with torch.no_grad():
        logits = loaded(images())
    assert logits.shape == (2, 4) and torch.isfinite(logits).all()
    assert adapter.parameter_count(target) == sum(p.numel() for p in loaded.parameters())
