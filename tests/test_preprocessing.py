"""Each model's own preprocessing (issue 31): lg prepares a model's images as
its ecosystem says (a timm hub folder's pretrained_cfg, a registered timm
model's default, a Hugging Face folder's preprocessor_config.json), else as
lg recorded or assumes; the same recipe survives a resize into the output,
and a preprocessor_config.json that is malformed or disagrees with itself is
refused in one line naming the field.

"The same" is checked entry by entry against timm's `resolve_data_config`
and the Hugging Face image processor, and on pixels: the same PIL image
through timm's `create_transform` (or the PIL image processor) and through
lg's image folder gives the same tensor within 1e-6."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import transformers
from PIL import Image
from timm.models import save_for_hf

import lgcli
from hf_image_models import non_trivial
from lgcli.api import inspect_checkpoint
from lgcli.checkpoint import read_checkpoint
from lgcli.images import FolderImages
from lgcli.preprocessing import PREPROCESSING, Preprocessing, from_image_processor
from lgcli.recipe import preprocessing_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fmnist_vit.safetensors"
FIELDS = ("mean", "std", "interpolation", "crop_pct", "crop_mode")


def recipe_of(path) -> Preprocessing:
    return lgcli.load(path).spec.extras[PREPROCESSING]


def as_timm(recipe: Preprocessing) -> dict:
    """lg's recipe as timm's data config states one."""
    return {"input_size": recipe.input_size, "mean": recipe.mean, "std": recipe.std,
            "interpolation": recipe.interpolation, "crop_pct": recipe.crop_pct, "crop_mode": recipe.crop_mode}


def assert_same_as_timm(recipe: Preprocessing, config: dict) -> None:
    """Entry by entry, as resolve_data_config gives them (its tuples, its floats)."""
    assert as_timm(recipe) == {key: tuple(v) if isinstance(v, list) else v for key, v in config.items()}


def picture(tmp_path: Path, size: tuple[int, int], mode: str = "RGB", seed: int = 0) -> Path:
    """An image file of `size` (width, height) under a class folder; its path."""
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
    path = tmp_path / "images" / "a" / "0.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, size=shape, dtype=np.uint8), mode=mode).save(path)
    return path


def lg_pixels(path: Path, recipe: Preprocessing) -> torch.Tensor:
    """What lg feeds a model of `recipe` for the image at `path` (an image folder's, read by PIL)."""
    channels = recipe.channels
    images, _ = FolderImages([path], [0], channels).batch([0], recipe.size, channels, recipe)
    return images[0]


# ---------------------------------------------------------------- timm

def hub_folder(tmp_path: Path, classes: int = 5) -> tuple[Path, torch.nn.Module]:
    """A tiny timm ViT whose pretrained_cfg is not lg's (ImageNet's mean,
    bicubic, a 0.875 centre crop), saved by timm's own writer."""
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, embed_dim=32, num_heads=2,
                              img_size=32, patch_size=8, num_classes=classes)
    model.pretrained_cfg = {**model.pretrained_cfg, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
                            "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center",
                            "input_size": (3, 32, 32)}
    folder = tmp_path / "hub"
    save_for_hf(model, str(folder), safe_serialization=True)
    return folder, model


def test_a_timm_hub_folder_is_fed_as_its_pretrained_cfg_says_and_keeps_it_through_a_resize(tmp_path, lg):
    folder, _ = hub_folder(tmp_path)
    recipe = recipe_of(folder)
    built = timm.create_model(f"local-dir:{folder}", pretrained=True)
    config = timm.data.resolve_data_config(model=built)
    assert_same_as_timm(recipe, config)
    assert recipe.source == "timm hub folder's config.json pretrained_cfg"
    # The same pixels: a 40 x 52 image, its shorter edge to floor(32 / 0.875) = 36, the centre 32 cut.
    path = picture(tmp_path, (40, 52))
    expected = timm.data.create_transform(**config)(Image.open(path).convert("RGB"))
    torch.testing.assert_close(lg_pixels(path, recipe), expected, rtol=0, atol=1e-6)
    # A resize keeps it: the output folder's pretrained_cfg and lg's reading of it say the same.
    out = tmp_path / "small"
    assert lg("shrink", folder, "--depth", "1", "-o", out).code == 0
    assert recipe_of(out).same_recipe(recipe)
    resized = timm.create_model(f"local-dir:{out}", pretrained=True)
    assert_same_as_timm(recipe_of(out), timm.data.resolve_data_config(model=resized))


REGISTERED = "deit_tiny_distilled_patch16_224"


def registered_file(tmp_path: Path) -> Path:
    """A file whose architecture is exactly the registered distilled DeiT-Ti (bicubic,
    ImageNet's mean and std, a 0.875 centre crop in timm's default cfg),
    saved without lg's metadata: only its architecture says what it is."""
    from safetensors.torch import save_file

    model = timm.create_model(REGISTERED, pretrained=False)
    path = tmp_path / "deit_tiny.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def test_a_file_of_a_registered_timm_model_is_fed_as_that_models_default_cfg(tmp_path, lg):
    path = registered_file(tmp_path)
    recipe = recipe_of(path)
    config = timm.data.resolve_data_config(pretrained_cfg=timm.models.get_pretrained_cfg(REGISTERED).to_dict())
    assert_same_as_timm(recipe, config)
    assert REGISTERED in recipe.source
    image = picture(tmp_path, (250, 300), seed=1)
    expected = timm.data.create_transform(**config)(Image.open(image).convert("RGB"))
    torch.testing.assert_close(lg_pixels(image, recipe), expected, rtol=0, atol=1e-6)
    # A shrunk copy is no longer that architecture: it records the recipe,
    # and its load line's data config states the same.
    out = tmp_path / "small.safetensors"
    assert lg("shrink", path, "--depth", "2", "-o", out).code == 0
    assert json.loads(read_checkpoint(out).metadata["lg.preprocessing"]) == recipe.record()
    report = inspect_checkpoint(out, heads=3)  # DeiT-Ti's 3 heads: a file of timm's records none
    scope: dict = {}
    exec(f"{report['load_imports']}\nmodel = {report['load_call']}", scope)
    assert_same_as_timm(recipe_of(out), timm.data.resolve_data_config(model=scope["model"]))
    assert report["preprocessing"]["source"] == "lg metadata"


def test_a_file_that_states_nothing_is_fed_lgs_default_and_says_it_assumed_so(tmp_path, lg):
    from safetensors.torch import save_file

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, embed_dim=64, num_heads=1,
                              img_size=28, patch_size=7, in_chans=1, num_classes=10)
    path = tmp_path / "plain.safetensors"
    save_file(model.state_dict(), str(path))
    result = lg("eval", path, "--heads", "1", "--test-subset", "20", "--json")
    assert result.code == 0, result.stderr
    assert f"{path} states no preprocessing: lg assumes mean 0.5 std 0.5, bilinear, squash, crop 1; give --mean, " \
        "--std and --interpolation if the model was trained otherwise" in result.stderr
    row = json.loads(result.stdout)["rows"][0]
    assert row["preprocessing"]["assumed"] is True and row["preprocessing"]["mean"] == [0.5]
    # Given by the user, it is not assumed (nor said to be).
    given = lg("eval", path, "--heads", "1", "--test-subset", "20", "--mean", "0.3", "--std", "0.2", "--json")
    assert given.code == 0 and "states no preprocessing" not in given.stderr
    row = json.loads(given.stdout)["rows"][0]
    assert (row["preprocessing"]["mean"], row["preprocessing"]["std"], row["preprocessing"]["assumed"]) == \
        ([0.3], [0.2], False)
    # A file lg wrote from it says its recipe is assumed too, naming which of the models read it is.
    shrunk = tmp_path / "shrunk.safetensors"
    assert lg("shrink", path, "--source-heads", "1", "--depth", "1", "-o", shrunk).code == 0
    both = lg("eval", shrunk, EXAMPLE, "--test-subset", "20", "--json")
    assert both.code == 0, both.stderr
    assert f"lg: {shrunk}: no file in its provenance states preprocessing: lg assumes mean 0.5" in both.stderr


def test_overrides_change_what_the_model_is_fed(tmp_path, lg):
    """--mean/--std reach the pixels: the example scored on images normalised
    otherwise gives another loss (a figure that cannot move if the flags are dropped)."""
    plain = json.loads(lg("eval", EXAMPLE, "--test-subset", "50", "--json").stdout)["rows"][0]
    moved = json.loads(lg("eval", EXAMPLE, "--test-subset", "50", "--mean", "0.2", "--std", "0.3",
                          "--interpolation", "bicubic", "--json").stdout)["rows"][0]
    assert plain["preprocessing"]["source"].startswith("lg's default")
    assert moved["preprocessing"]["interpolation"] == "bicubic"
    assert moved["final"]["loss"] != plain["final"]["loss"]


def test_the_eval_table_says_how_each_rows_images_were_prepared(lg):
    """The table, not only --json: one line when the rows share a recipe, one per row when they differ."""
    same = lg("eval", EXAMPLE, "--test-subset", "20", "--steps", "0", "--baseline", "random")
    assert same.code == 0, same.stderr
    legend = " ".join(same.stdout.decode().split())  # the legend wraps at the console's width
    assert "images prepared as: mean 0.5 std 0.5, bilinear, squash, crop 1 (lg's default" in legend
    assert "images of" not in legend
    moved = lg("eval", EXAMPLE, "--test-subset", "20", "--steps", "0", "--mean", "0.2", "--std", "0.3")
    assert "images prepared as: mean 0.2 std 0.3, bilinear, squash, crop 1" in " ".join(moved.stdout.decode().split())


@pytest.mark.parametrize("flags, message", [
    (("--mean", "0.5,x"), "--mean must be numbers separated by commas"),
    (("--std", "0"), "--std must be positive"),
    (("--interpolation", "cubic"), "--interpolation must be one of nearest, bilinear, bicubic"),
    (("--mean", "0.4,0.4,0.4"), "--mean has 3 values but the model takes 1 channel"),
])
def test_bad_overrides_are_refused_in_one_line(flags, message, lg):
    result = lg("eval", EXAMPLE, "--test-subset", "10", *flags)
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


# ---------------------------------------------------------------- lg's own outputs

def test_the_example_is_fed_as_today_and_its_outputs_record_it(tmp_path, lg):
    recipe = recipe_of(EXAMPLE)
    assert (recipe.mean, recipe.std, recipe.interpolation, recipe.crop_pct, recipe.crop_mode) == \
        ((0.5,), (0.5,), "bilinear", 1.0, "squash")
    assert not recipe.assumed
    out = tmp_path / "small.safetensors"
    result = lg("shrink", EXAMPLE, "--depth", "3", "-o", out)
    assert result.code == 0 and "preprocessing" not in result.stderr
    metadata = read_checkpoint(out).metadata
    assert json.loads(metadata["lg.preprocessing"]) == {"mean": [0.5], "std": [0.5], "interpolation": "bilinear",
                                                         "crop_pct": 1.0, "crop_mode": "squash"}
    assert recipe_of(out).same_recipe(recipe)


def test_a_learngene_carries_its_teachers_preprocessing_to_its_descendants(tmp_path, lg):
    folder, _ = hub_folder(tmp_path, classes=10)
    gene = tmp_path / "tleg.lg.safetensors"
    result = lg("condense", folder, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "1",
                "--subset", "64", "--test-subset", "16", "--interpolation", "bilinear", "-o", gene)
    assert result.code == 0, result.stderr
    teacher = recipe_of(folder)
    recorded = json.loads(read_checkpoint(gene).metadata["lg.preprocessing"])
    assert recorded == {**teacher.record(), "interpolation": "bilinear"}
    shown = json.loads(lg("inspect", gene, "--json").stdout)["preprocessing"]
    assert {k: shown[k] for k in recorded} == recorded and shown["source"] == "lg metadata"
    grown = tmp_path / "grown.safetensors"
    assert lg("grow", gene, "--depth", "3", "-o", grown).code == 0
    assert recipe_of(grown).record() == recorded
    report = inspect_checkpoint(grown)  # its load line's data config says the same
    scope: dict = {}
    exec(f"{report['load_imports']}\nmodel = {report['load_call']}", scope)
    assert_same_as_timm(recipe_of(grown), timm.data.resolve_data_config(model=scope["model"]))


# ---------------------------------------------------------------- Hugging Face

def hf_folder(tmp_path: Path, config, model_class: str, processor) -> Path:
    folder = tmp_path / model_class
    torch.manual_seed(0)
    non_trivial(getattr(transformers, model_class)(config)).save_pretrained(folder)
    processor.save_pretrained(folder)  # transformers' own writer of preprocessor_config.json
    return folder


IMAGENET = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
TINY_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                patch_size=8, num_labels=4)
# name -> (config, model class, the PIL image processor, its preprocessor_config.json's class)
HF_CASES = {
    "vit": (lambda: transformers.ViTConfig(**TINY_VIT), "ViTForImageClassification", "ViTImageProcessorPil",
            dict(size={"height": 32, "width": 32}, resample=3, **IMAGENET)),
    "dinov2": (lambda: transformers.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  mlp_ratio=2, image_size=32, patch_size=8, num_labels=4),
               "Dinov2ForImageClassification", "BitImageProcessorPil",
               dict(size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32}, resample=3, **IMAGENET)),
    "clip": (lambda: transformers.CLIPVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                    intermediate_size=64, image_size=32, patch_size=8),
             "CLIPVisionModel", "CLIPImageProcessorPil",
             dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})),
    "swin": (lambda: transformers.SwinConfig(embed_dim=16, depths=[2, 2], num_heads=[2, 4], image_size=32,
                                             patch_size=2, window_size=4, num_labels=5),
             "SwinForImageClassification", "ViTImageProcessorPil",
             dict(size={"height": 32, "width": 32}, resample=2, image_mean=[0.3, 0.4, 0.5],
                  image_std=[0.2, 0.25, 0.3])),
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_a_hugging_face_folder_is_fed_as_its_image_processor_prepares(case, tmp_path, lg):
    make_config, model_class, processor_class, fields = HF_CASES[case]
    processor = getattr(transformers, processor_class)(**fields)
    folder = hf_folder(tmp_path, make_config(), model_class, processor)
    recipe = recipe_of(folder)
    assert recipe.source == "Hugging Face folder's preprocessor_config.json"
    # Entry by entry: what the processor says in timm's terms.
    said = processor.to_dict()
    assert recipe.mean == pytest.approx(tuple(said["image_mean"]), abs=0) and \
        recipe.std == pytest.approx(tuple(said["image_std"]), abs=0)
    assert recipe.interpolation == {2: "bilinear", 3: "bicubic"}[int(said["resample"])]
    size = said["size"]
    crop = said.get("crop_size") if said.get("do_center_crop") else None
    assert recipe.crop_mode == ("center" if "shortest_edge" in size else "squash")
    assert recipe.scale_size() == size.get("shortest_edge", size.get("height"))
    assert recipe.size == (crop or size)["height"] if crop or "height" in size else True
    # The same pixels, through the processor (PIL) and through lg, for an
    # image whose resized edges exceed the crop by even amounts (both centre alike).
    path = picture(tmp_path, (40, 52))
    expected = torch.from_numpy(np.asarray(processor(Image.open(path).convert("RGB"),
                                                     return_tensors="np")["pixel_values"][0]))
    torch.testing.assert_close(lg_pixels(path, recipe), expected.float(), rtol=0, atol=1e-6)
    # A resize keeps the folder's preprocessor_config.json as it is, and lg reads the same recipe back.
    out = tmp_path / "small"
    assert lg("shrink", folder, "--depth", "1", "-o", out).code == 0
    assert (out / "preprocessor_config.json").read_bytes() == (folder / "preprocessor_config.json").read_bytes()
    assert recipe_of(out).same_recipe(recipe)


def test_inspect_shows_the_preprocessing_and_where_it_came_from(tmp_path, lg):
    make_config, model_class, processor_class, fields = HF_CASES["dinov2"]
    folder = hf_folder(tmp_path, make_config(), model_class, getattr(transformers, processor_class)(**fields))
    result = lg("inspect", folder, "--json")
    assert result.code == 0
    shown = json.loads(result.stdout)["preprocessing"]
    assert shown == {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "interpolation": "bicubic",
                     "crop_pct": shown["crop_pct"], "crop_mode": "center", "assumed": False,
                     "input_size": [3, 32, 32], "source": "Hugging Face folder's preprocessor_config.json"}
    assert math.floor(32 / shown["crop_pct"]) == 36
    table = lg("inspect", folder).stdout.decode()
    # The value column, its wrapped lines joined (rich wraps at the terminal's width).
    cells = [line.split("│") for line in table.splitlines() if line.count("│") == 3]
    start = next(i for i, cell in enumerate(cells) if cell[1].strip() == "preprocessing")
    end = next(i for i in range(start + 1, len(cells)) if cells[i][1].strip())
    row = " ".join(cell[2].strip() for cell in cells[start:end])
    assert "(from Hugging Face folder's preprocessor_config.json)" in row
    assert "mean 0.485,0.456,0.406, std 0.229,0.224,0.225, bicubic, center, crop 0.888889" in row


def test_a_folder_without_a_processor_config_is_written_one_stating_what_lg_fed(tmp_path, lg):
    folder = tmp_path / "bare"
    torch.manual_seed(0)
    non_trivial(transformers.ViTForImageClassification(transformers.ViTConfig(**TINY_VIT))).save_pretrained(folder)
    out = tmp_path / "small"
    assert lg("shrink", folder, "--depth", "1", "-o", out).code == 0
    processor = transformers.AutoImageProcessor.from_pretrained(out)
    recipe = recipe_of(out)
    assert recipe.assumed and recipe.mean == (0.5, 0.5, 0.5)
    path = picture(tmp_path, (40, 52))
    pil = transformers.ViTImageProcessorPil.from_pretrained(out)
    prepared = pil(Image.open(path).convert("RGB"), return_tensors="np")["pixel_values"][0]
    expected = torch.from_numpy(np.asarray(prepared))
    torch.testing.assert_close(lg_pixels(path, recipe), expected.float(), rtol=0, atol=1e-6)
    assert type(processor).__name__ == "ViTImageProcessor"


GREY_VIT = dict(TINY_VIT, num_channels=1)


@pytest.mark.parametrize("change, message", [
    (lambda c: "{not json", "preprocessor_config.json is not valid JSON"),
    (lambda c: {**c, "image_mean": [0.5, 0.5, 0.5]}, "image_mean has 3 values but the model takes 1 channel"),
    (lambda c: {**c, "image_std": [0.0]}, "image_std must be positive"),
    (lambda c: {**c, "image_std": "wide"}, "image_std must be a number or a list of numbers"),
    (lambda c: {**c, "resample": 9}, "resample must be one of PIL's filters"),
    (lambda c: {**c, "size": {"height": 32, "width": 40}}, "size is 32x40: lg feeds square images"),
    (lambda c: {**c, "size": {"long": 32}}, "size must be a positive whole number"),
    (lambda c: {**c, "do_center_crop": True, "crop_size": {"height": 48, "width": 48}},
     "crop_size 48 is larger than the size 32"),
    (lambda c: {**c, "rescale_factor": 1.0}, "rescale_factor must be 1/255"),
])
def test_a_malformed_or_self_contradicting_processor_config_is_refused_naming_the_field(change, message, tmp_path, lg):
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5], image_std=[0.5])
    folder = hf_folder(tmp_path, transformers.ViTConfig(**GREY_VIT), "ViTForImageClassification", processor)
    assert lg("inspect", folder).code == 0  # as written, it agrees with the model
    path = folder / "preprocessor_config.json"
    changed = change(json.loads(path.read_text()))
    path.write_text(changed if isinstance(changed, str) else json.dumps(changed))
    for command in (("inspect", folder), ("shrink", folder, "--depth", "1", "-o", tmp_path / "out")):
        result = lg(*command)
        assert result.code == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"lg: error: {folder}: preprocessor_config.json") \
            and message in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_the_image_processor_conversion_keeps_the_resize_edge(tmp_path):
    """crop_pct = crop / edge in floating point may put floor(crop / crop_pct)
    one below the edge; the recipe keeps it the processor's, for every crop."""
    for edge in range(8, 600):
        for crop in (edge - 1, edge * 7 // 8, edge // 2):
            if crop < 1:
                continue
            config = {"size": {"shortest_edge": edge}, "crop_size": {"height": crop, "width": crop},
                      "do_center_crop": True, "image_mean": [0.5], "image_std": [0.5], "resample": 3}
            recipe = from_image_processor(config, (3, crop, crop))
            assert recipe.scale_size() == edge, (edge, crop)


def test_a_live_model_lg_did_not_load_is_said_to_be_assumed():
    said = []
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1, embed_dim=32, num_heads=2,
                              img_size=32, patch_size=8)
    recipe = preprocessing_of(model, notify=said.append)
    assert recipe.assumed and recipe.input_size == (3, 32, 32) and len(said) == 1
    loaded, _ = lgcli.load_model(EXAMPLE)
    assert preprocessing_of(loaded, notify=said.append).mean == (0.5,) and len(said) == 1


def test_every_model_lg_builds_from_weights_or_a_spec_is_told_its_recipe(tmp_path):
    """`lgcli.load_model`, `lgcli.create_model` and the builder every command
    uses (`lgcli.loading.build_model`) give models that state the file's
    recipe (ImageNet's mean and std here), not lg's assumed default."""
    from lgcli.loading import build_model

    folder, _ = hub_folder(tmp_path)
    recipe, said = recipe_of(folder), []
    loaded = lgcli.load(folder)
    models = {"load_model": lgcli.load_model(folder)[0], "create_model": lgcli.create_model(loaded.spec, seed=0),
              "build_model": build_model(loaded.spec, loaded.stack)}
    for name, model in models.items():
        stated = preprocessing_of(model, notify=said.append)
        assert stated.same_recipe(recipe) and not stated.assumed, name
        assert stated.mean == (0.485, 0.456, 0.406), name
        # timm's own reading of the model (its pretrained_cfg) says the same.
        assert_same_as_timm(recipe, timm.data.resolve_data_config(model=model)), name
    assert said == []
    # The example (1 channel, 28 px, lg's default): not timm's registered 3 x 224.
    example = lgcli.load_model(EXAMPLE)[0]
    assert_same_as_timm(recipe_of(EXAMPLE), timm.data.resolve_data_config(model=example))


def test_an_architecture_timm_registers_twice_takes_the_named_ones_and_says_it_assumed(tmp_path):
    """vit_tiny_patch16_224 and deit_tiny_patch16_224 are one architecture
    trained twice (0.5 bicubic 0.9; ImageNet's bicubic 0.875): the load line's
    model's recipe is taken, marked assumed, naming the other."""
    from safetensors.torch import save_file

    path = tmp_path / "tiny.safetensors"
    save_file(timm.create_model("vit_tiny_patch16_224", pretrained=False).state_dict(), str(path))
    recipe = recipe_of(path)
    assert recipe.assumed and "deit_tiny_patch16_224" in recipe.source
    assert_same_as_timm(recipe, timm.data.resolve_data_config(
        pretrained_cfg=timm.models.get_pretrained_cfg("vit_tiny_patch16_224").to_dict()))
    said = []
    preprocessing_of(path, notify=said.append)
    assert len(said) == 1 and "also deit_tiny_patch16_224's, prepared otherwise" in said[0]


def test_a_folder_trained_with_other_settings_states_them_in_its_processor_config(tmp_path):
    """What lg trained a model with (--mean ... over the folder's own) is what
    the output's preprocessor_config.json says, read back by transformers;
    the fields lg does not set stay the source's."""
    from lgcli.api import save
    from lgcli.preprocessing import Overrides, with_preprocessing

    make_config, model_class, processor_class, fields = HF_CASES["dinov2"]
    folder = hf_folder(tmp_path, make_config(), model_class, getattr(transformers, processor_class)(**fields))
    loaded = lgcli.load(folder)
    trained = Overrides.parse("0.1,0.2,0.3", "0.4", "bilinear").apply(loaded.spec.extras[PREPROCESSING])
    out = tmp_path / "out"
    save(out, with_preprocessing(loaded.spec, trained), loaded.stack, source=loaded)
    written = json.loads((out / "preprocessor_config.json").read_text())
    source = json.loads((folder / "preprocessor_config.json").read_text())
    assert (written["image_mean"], written["image_std"], written["resample"]) == ([0.1, 0.2, 0.3], [0.4] * 3, 2)
    assert {k: v for k, v in written.items() if k not in ("image_mean", "image_std", "resample")} == \
        {k: v for k, v in source.items() if k not in ("image_mean", "image_std", "resample")}
    assert recipe_of(out).same_recipe(trained)
    processor = transformers.AutoImageProcessor.from_pretrained(out)
    assert list(processor.image_mean) == [0.1, 0.2, 0.3]


def test_a_timm_swin_files_load_line_states_the_preprocessing_lg_feeds_it(tmp_path, lg):
    """A plain timm Swin file (no hub folder): its load line's
    pretrained_cfg_overlay gives timm's resolve_data_config the recipe lg
    uses, entry by entry, and create_transform the same pixels; so does a
    resized copy's."""
    import safetensors.torch

    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, embed_dim=16, depths=(2, 2),
                              num_heads=(2, 4), img_size=32, patch_size=2, window_size=4, num_classes=5)
    path = tmp_path / "swin.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    out = tmp_path / "small.safetensors"
    assert lg("shrink", path, "--depth", "1", "-o", out).code == 0
    for checkpoint in (path, out):
        recipe = recipe_of(checkpoint)
        report = inspect_checkpoint(checkpoint)
        assert "pretrained_cfg_overlay" in report["load_call"]
        scope: dict = {}
        exec(f"{report['load_imports']}\nmodel = {report['load_call']}", scope)
        config = timm.data.resolve_data_config(model=scope["model"])
        assert_same_as_timm(recipe, config)
        image = picture(tmp_path, (40, 52), seed=2)
        expected = timm.data.create_transform(**config)(Image.open(image).convert("RGB"))
        torch.testing.assert_close(lg_pixels(image, recipe), expected, rtol=0, atol=1e-6)


def test_a_dinov2_is_fed_at_its_processors_size_as_transformers_feeds_it(tmp_path, lg):
    """transformers' DINOv2 interpolates its positions for any image size,
    and its processor prepares 224-pixel images for a config of 518: lg feeds
    it at the processor's size, as transformers does (five times fewer tokens).
    Here a config of 32 px and a processor of 16: lg's loss on an image is
    transformers' on the processor's pixels; a resize keeps the size in lg's
    metadata and the processor config."""
    from lgcli.accuracy import evaluate_accuracy
    from lgcli.calibration import calibration_examples
    from lgcli.heads import model_input

    processor = transformers.BitImageProcessorPil(size={"shortest_edge": 20}, crop_size={"height": 16, "width": 16},
                                                  resample=3, **IMAGENET)
    folder = hf_folder(tmp_path, HF_CASES["dinov2"][0](), "Dinov2ForImageClassification", processor)
    recipe = recipe_of(folder)
    assert (recipe.size, recipe.image_size, recipe.input_size) == (16, 16, (3, 32, 32))
    assert recipe.report()["input_size"] == [3, 16, 16]  # lg inspect --json: the size images are fed at
    assert recipe.source == ("Hugging Face folder's preprocessor_config.json: 16-pixel images, the positions "
                             "(stored for 32) interpolated as transformers does")
    model, _ = lgcli.load_model(folder)
    assert model_input(model) == (3, 16)
    path = picture(tmp_path, (40, 52))
    pixels = processor(Image.open(path).convert("RGB"), return_tensors="pt")["pixel_values"]
    assert pixels.shape[-1] == 16
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(pixels.float()).logits, torch.tensor([0])).item()
    ours = evaluate_accuracy(model, FolderImages([path], [0], 3))
    assert ours["loss"] == pytest.approx(expected, rel=1e-5)
    # The calibration pass of a data-aware resize sees the same pixels (a
    # folder of copies of the image, so that a split holds some out).
    for copy in range(1, 6):
        (path.parent / f"{copy}.png").write_bytes(path.read_bytes())
    loaded = lgcli.load(folder)
    examples, _ = calibration_examples(model, loaded.spec, str(path.parent.parent), samples=1, seed=0,
                                       seq_len=None, companions=loaded.checkpoint.companions, where=str(folder))
    torch.testing.assert_close(examples.batch([0])[0], pixels.float(), rtol=0, atol=1e-6)
    # What lg writes says it: its metadata (read first) and the processor config, both 16.
    out = tmp_path / "small"
    assert lg("shrink", folder, "--depth", "1", "-o", out).code == 0
    assert recipe_of(out) == recipe and recipe_of(out).image_size == 16
    assert read_checkpoint(out).lg[PREPROCESSING]["image_size"] == 16
    assert (out / "preprocessor_config.json").read_bytes() == (folder / "preprocessor_config.json").read_bytes()


def test_only_a_model_that_takes_any_size_is_fed_at_another(tmp_path):
    """A ViT's positions are fixed: fed at its config's size, its processor's
    crop taken in the same proportion; lg's metadata stating another size for
    such a model is refused in one line."""
    from lgcli.preprocessing import from_record

    processor = transformers.ViTImageProcessorPil(size={"height": 16, "width": 16}, **IMAGENET)
    folder = hf_folder(tmp_path, HF_CASES["vit"][0](), "ViTForImageClassification", processor)
    recipe = recipe_of(folder)
    assert (recipe.size, recipe.image_size) == (32, None)
    assert recipe.source.endswith("which prepares 16-pixel images: fed at the model's 32")
    with pytest.raises(lgcli.LgError, match=r"^image_size is 16, but the model takes 32-pixel images only$"):
        from_record({**recipe.record(), "image_size": 16}, (3, 32, 32), "lg metadata")
    record = {**recipe.record(), "image_size": 16}
    assert from_record(record, (3, 32, 32), "lg metadata", any_size=True).image_size == 16
    assert from_record(record, (3, 32, 32), "lg metadata", any_size=True).record() == record
