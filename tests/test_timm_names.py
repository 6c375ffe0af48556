"""The load line of a single-file timm ViT is a timm user's: it names the
registered timm model whose architecture the file has (found in a table of
timm's registry, `lgcli.arch.timm_vit_names`, so `lg inspect` needs no timm),
else the closest one plus what differs; and its data config is lg's own
preprocessing, so `timm.data.create_transform` feeds the model what lg does."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

import lgcli
from lgcli.api import inspect_checkpoint
from lgcli.arch.timm_vit_names import REGISTERED_PREPROCESSING, REGISTERED_VITS, SPECIAL_VARIANTS, USABLE_KWARGS
from lgcli.images import TensorImages

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fmnist_vit.safetensors"


def registered_plain_vits() -> dict[str, tuple[str, dict]]:
    """timm's registered ViTs and DeiTs built from VisionTransformer (or the
    distilled DeiT) by keyword arguments lg reads alone: name -> (kind, the
    arguments the entry point passes, with the image size its default
    pretrained config gives). Read by calling each entry point with timm's
    builder replaced, so no model is built."""
    import timm.models.deit as deit
    import timm.models.vision_transformer as vit
    from timm.models import _registry

    captured: dict[str, tuple[str, dict]] = {}

    class Captured(Exception):
        pass

    def vit_builder(variant, pretrained=False, **kwargs):
        captured[variant] = ("vit", kwargs)
        raise Captured

    def deit_builder(variant, pretrained=False, distilled=False, **kwargs):
        captured[variant] = ("deit-distilled" if distilled else "vit", kwargs)
        raise Captured

    saved = vit._create_vision_transformer, deit._create_deit
    vit._create_vision_transformer, deit._create_deit = vit_builder, deit_builder
    try:
        for name in timm.list_models(["vit_*", "deit*"]):
            entry = _registry.model_entrypoint(name)
            if entry.__module__ not in (vit.__name__, deit.__name__):
                continue  # hybrids, relative positions, EVA, ...: other classes
            try:
                entry(pretrained=False)
            except Captured:
                pass
    finally:
        vit._create_vision_transformer, deit._create_deit = saved
    table = {}
    for name, (kind, kwargs) in sorted(captured.items()):
        if set(kwargs) - set(USABLE_KWARGS) or kwargs.get("global_pool") == "map":
            continue  # an activation, a norm or a pooling lg does not read
        if any(special in name for special in SPECIAL_VARIANTS):
            continue  # timm loads these otherwise (siglip non-strictly, radio and flexi resampled)
        image = timm.models.get_pretrained_cfg(name).input_size[-1]
        table[name] = (kind, {**kwargs, "img_size": kwargs.get("img_size", image)})
    return table


def test_the_table_is_timms_registry():
    assert REGISTERED_VITS == registered_plain_vits()


def test_the_preprocessing_table_is_timms_default_cfgs():
    """Each listed model's default pretrained config, as lg keeps it (for a
    file of that architecture: `vit.timm_stated_preprocessing`)."""
    def cfg(name: str) -> tuple:
        c = timm.models.get_pretrained_cfg(name)
        return (tuple(float(v) for v in c.mean), tuple(float(v) for v in c.std), c.interpolation,
                float(c.crop_pct), c.crop_mode)

    assert REGISTERED_PREPROCESSING == {name: cfg(name) for name in REGISTERED_VITS}


def save_vit(path, name, **kwargs):
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    lgcli.save_model(model, path)  # records the heads (a plain file's would be assumed: 64 per head)
    return model


def built_by_line(report):
    scope: dict = {}
    exec(f"{report['load_imports']}\nmodel = {report['load_call']}", scope)
    return scope["model"].eval()


@pytest.mark.parametrize("name, kwargs, expected", [
    ("vit_tiny_patch16_224", {"num_classes": 10}, "timm.create_model('vit_tiny_patch16_224', "),
    ("deit_tiny_distilled_patch16_224", {"num_classes": 7}, "timm.create_model('deit_tiny_distilled_patch16_224', "),
    ("vit_tiny_patch16_224", {"num_classes": 5, "in_chans": 1, "depth": 2},
     "timm.create_model('vit_tiny_patch16_224', "),
])
def test_a_file_shaped_like_a_registered_model_is_named_so(tmp_path, name, kwargs, expected):
    path = tmp_path / "model.safetensors"
    model = save_vit(path, name, **kwargs)
    report = inspect_checkpoint(path)
    call = report["load_call"]
    assert call.startswith(expected)
    # Only what differs from the named model is passed (and the classes).
    differs = {k: v for k, v in kwargs.items() if k != "num_classes"}
    passed = [keyword.arg for keyword in ast.parse(call).body[0].value.keywords]
    assert sorted(passed) == sorted(["pretrained", "pretrained_cfg_overlay", *differs, "num_classes"])
    loaded = built_by_line(report)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    x = torch.randn(2, kwargs.get("in_chans", 3), 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_the_example_is_named_by_its_closest_registered_model_and_loads_strictly():
    report = inspect_checkpoint(EXAMPLE)
    model = built_by_line(report)  # pretrained=True: timm loads the file strictly
    assert (model.patch_embed.proj.in_channels, model.patch_embed.img_size) == (1, (28, 28))


def test_the_example_line_gives_a_transform_that_preprocesses_as_lg_does():
    model = built_by_line(inspect_checkpoint(EXAMPLE))
    config = timm.data.resolve_data_config(model=model)
    assert config["input_size"] == (1, 28, 28)
    transform = timm.data.create_transform(**config)
    pixels = np.random.default_rng(0).integers(0, 256, size=(28, 28), dtype=np.uint8)
    timm_input = transform(Image.fromarray(pixels, mode="L"))
    assert timm_input.shape == (1, 28, 28)
    lg_input, _ = TensorImages(torch.from_numpy(pixels)[None, None], torch.zeros(1)).batch([0], 28, 1)
    torch.testing.assert_close(timm_input, lg_input[0], rtol=0, atol=1e-6)
    # An image at another size is squashed to the model's, as lg's image folders are (PIL, bilinear).
    large = Image.fromarray(np.random.default_rng(1).integers(0, 256, size=(40, 56), dtype=np.uint8), mode="L")
    expected = np.asarray(large.resize((28, 28), Image.BILINEAR), dtype=np.float32) / 255
    torch.testing.assert_close(transform(large)[0], torch.from_numpy((expected - 0.5) / 0.5), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(REGISTERED_VITS))
def test_every_registered_shape_gets_a_line_that_loads_it_strictly(tmp_path, name):
    """Each registered model's flags (pooling, registers, layer scale, ...) at
    a tiny size: the line (whatever it names) builds the same function."""
    path = tmp_path / "model.safetensors"
    model = save_vit(path, name, depth=1, embed_dim=32, num_heads=2, patch_size=8, img_size=32, num_classes=3)
    report = inspect_checkpoint(path)
    loaded = built_by_line(report)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():  # the same weights in the same function (fused attention may differ in the last bit)
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-6)


def test_a_line_of_a_model_prepared_otherwise_gives_a_transform_that_preprocesses_as_lg_does(tmp_path):
    """Not only lg's own 0.5: a shrunk distilled DeiT-Ti records its
    registered model's recipe (ImageNet's mean and std, bicubic, a 0.9
    centre crop), and its line's data config prepares a PIL image exactly as
    lg's image folders do (issue 31)."""
    from safetensors.torch import save_file

    from lgcli.api import load
    from lgcli.images import FolderImages
    from lgcli.preprocessing import PREPROCESSING
    from lgcli.resize import resize_file

    source = tmp_path / "deit.safetensors"
    save_file(timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False).state_dict(), str(source))
    out = tmp_path / "small.safetensors"
    resize_file(str(source), str(out), direction="shrink", depth=2, notify=lambda message: None)
    model = built_by_line(inspect_checkpoint(out, heads=3))  # DeiT-Ti's 3 heads: a file of timm's records none
    config = timm.data.resolve_data_config(model=model)
    registered = timm.models.get_pretrained_cfg("deit_tiny_distilled_patch16_224")
    assert (config["mean"], config["interpolation"], config["crop_pct"], config["crop_mode"]) == \
        (registered.mean, registered.interpolation, registered.crop_pct, registered.crop_mode) == \
        ((0.485, 0.456, 0.406), "bicubic", 0.9, "center")
    image = tmp_path / "c" / "0.png"
    image.parent.mkdir()
    Image.fromarray(np.random.default_rng(2).integers(0, 256, size=(300, 260, 3), dtype=np.uint8)).save(image)
    recipe = load(out).spec.extras[PREPROCESSING]
    lg_input, _ = FolderImages([image], [0], 3).batch([0], 224, 3, recipe)
    timm_input = timm.data.create_transform(**config)(Image.open(image).convert("RGB"))
    torch.testing.assert_close(timm_input, lg_input[0], rtol=0, atol=1e-6)
