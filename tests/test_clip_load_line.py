"""timm's CLIP ViTs (pre-norm, LayerNorm eps 1e-5 where every other timm ViT
has 1e-6, which no tensor shows): a file of one, saved with no lg metadata,
is built by lg, and by the line `lg inspect` prints, as a registered CLIP
ViT, so both compute the source's logits; so do the lines of what lg writes
from it. The table of those models is timm's registry."""

from __future__ import annotations

import functools
import re

import pytest
import timm
import torch
from safetensors.torch import save_file

import lgcli
from conftest import printed_model
from lgcli.arch import timm_vit_names
from lgcli.arch.timm_vit_names import SPECIAL_VARIANTS, USABLE_KWARGS
from lgcli.resize import resize_file

CLIP_NORM_EPS = 1e-5  # nn.LayerNorm's default, which timm's CLIP ViTs keep


def registered_clip_vits() -> dict[str, tuple[str, dict]]:
    """timm's registered ViTs whose arguments are ones lg reads plus a
    LayerNorm of another eps (`norm_layer`): name -> (kind, the other
    arguments, with the image size of the default pretrained config), each
    checked to be CLIP's eps. Read by calling each entry point with timm's
    builder replaced, so no model is built."""
    import timm.models.vision_transformer as vit
    from timm.models import _registry

    captured: dict[str, dict] = {}

    class Captured(Exception):
        pass

    def builder(variant, pretrained=False, **kwargs):
        captured[variant] = kwargs
        raise Captured

    saved, vit._create_vision_transformer = vit._create_vision_transformer, builder
    try:
        for name in timm.list_models("vit_*"):
            entry = _registry.model_entrypoint(name)
            if entry.__module__ == vit.__name__:
                try:
                    entry(pretrained=False)
                except Captured:
                    pass
    finally:
        vit._create_vision_transformer = saved
    table = {}
    for name, kwargs in sorted(captured.items()):
        norm = kwargs.get("norm_layer")
        rest = {key: value for key, value in kwargs.items() if key != "norm_layer"}
        if not isinstance(norm, functools.partial) or set(rest) - set(USABLE_KWARGS):
            continue  # another norm class (RmsNorm), another activation (quick_gelu), another block
        if any(special in name for special in SPECIAL_VARIANTS):
            continue
        assert issubclass(norm.func, torch.nn.LayerNorm) and norm.keywords == {"eps": CLIP_NORM_EPS}, name
        image = timm.models.get_pretrained_cfg(name).input_size[-1]
        table[name] = ("vit", {**rest, "img_size": rest.get("img_size", image)})
    return table


def test_the_clip_table_is_timms_registry():
    assert timm_vit_names.CLIP_NORM_EPS == CLIP_NORM_EPS
    assert timm_vit_names.REGISTERED_CLIP_VITS == registered_clip_vits()


def clip_vit(name: str) -> torch.nn.Module:
    """A tiny model of timm's `name`, every parameter off its initial value (heads of 64: read as such)."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, embed_dim=128, depth=2, num_heads=2, img_size=32,
                              patch_size=8, num_classes=10)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


def images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def outputs(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(images())


@pytest.mark.parametrize("name", ["vit_base_patch16_clip_224", "vit_medium_patch32_clip_224"])
def test_a_timm_clip_vit_file_gets_a_line_that_computes_its_logits(name, tmp_path):
    source = clip_vit(name)
    path = tmp_path / "c.safetensors"
    save_file(source.state_dict(), str(path))  # a foreign file: no lg metadata
    report = lgcli.inspect_checkpoint(path, heads=2)  # a foreign file records no heads: given, as lg inspect --heads
    call = report["load_call"]
    assert re.match(r"timm\.create_model\('vit_\w+_clip_\d+', pretrained=True, ", call), call
    expected = outputs(source)
    line = printed_model(path, heads=2)
    norms = [module.eps for module in line.modules() if isinstance(module, torch.nn.LayerNorm)]
    assert norms and set(norms) == {CLIP_NORM_EPS}
    torch.testing.assert_close(outputs(line), expected, rtol=0, atol=1e-6)
    mine, _ = lgcli.load_model(path, heads=2)  # lg's own model of it (eval, distill, ...) too
    torch.testing.assert_close(outputs(mine), expected, rtol=0, atol=1e-6)


def test_the_line_of_a_clip_vit_lg_grew_keeps_its_logits(tmp_path):
    source = clip_vit("vit_base_patch16_clip_224")
    path, out = tmp_path / "c.safetensors", tmp_path / "deeper.safetensors"
    save_file(source.state_dict(), str(path))
    resize_file(str(path), str(out), direction="grow", depth=4, method="clone", source_heads=2,
                notify=lambda message: None)
    torch.testing.assert_close(outputs(printed_model(out)), outputs(source), rtol=0, atol=1e-6)


def test_a_file_at_a_registered_clip_size_is_named_by_it(tmp_path):
    """The closest registered CLIP ViT is the one of the file's sizes: nothing but the classes passed."""
    torch.manual_seed(0)
    model = timm.create_model("vit_xsmall_patch16_clip_224", pretrained=False, depth=1, num_classes=3)
    path = tmp_path / "x.safetensors"
    lgcli.save_model(model.eval(), path)
    call = lgcli.inspect_checkpoint(path)["load_call"]
    assert call.startswith("timm.create_model('vit_xsmall_patch16_clip_224', ") and call.endswith(
        "depth=1, num_classes=3)")
