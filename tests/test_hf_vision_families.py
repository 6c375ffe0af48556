"""Hugging Face DINOv2 (with and without registers) and CLIP vision folders in
and out (issue 21): read into
the canonical Stack and written back bit for bit; the roles are the timm
ViT's (layer scale, SwiGLU's gate and up, the grouped classifier, CLIP's
projection) entry by entry; inspect reports their sizes and load line; the
training-free resizes write folders that from_pretrained loads with nothing
missing, unexpected or mismatched, and that run; clone keeps the outputs.
A whole CLIPModel folder, a config that disagrees with the weights and an MLP
size a DINOv2 config cannot state are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import save_file

import lgcli
from hf_image_models import (assert_features_refused, assert_trained, folder_builder, load_strict, non_trivial, piped_config,
                             resized_configs, resizes, training_commands, weights, written_back)

IMAGE = dict(image_size=16, patch_size=4)
# Width 48 with heads of 24: a SwiGLU of mlp_ratio 2 has 64 units, and its
# MLP stays one whole ratio at half and at twice the width (32, 128), so
# every resize below (and clone's exact doubling) can be written.
DINOV2 = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, **IMAGE)
CLIP = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, projection_dim=24,
            **IMAGE)
# variant -> (config class, its arguments, model class, family, the outputs that clone must keep)
VARIANTS = {
    "dinov2": ("Dinov2Config", DINOV2, "Dinov2Model", "hf-dinov2", ("last_hidden_state", "pooler_output")),
    "dinov2-swiglu-classifier": ("Dinov2Config", dict(DINOV2, use_swiglu_ffn=True, num_labels=10),
                                 "Dinov2ForImageClassification", "hf-dinov2", ("logits",)),
    "dinov2-registers": ("Dinov2WithRegistersConfig", dict(DINOV2, num_register_tokens=3),
                         "Dinov2WithRegistersModel", "hf-dinov2-registers", ("last_hidden_state", "pooler_output")),
    "dinov2-registers-classifier": ("Dinov2WithRegistersConfig", dict(DINOV2, num_register_tokens=3, num_labels=10),
                                    "Dinov2WithRegistersForImageClassification", "hf-dinov2-registers",
                                    ("logits",)),
    "clip-vision": ("CLIPVisionConfig", CLIP, "CLIPVisionModel", "hf-clip", ("last_hidden_state", "pooler_output")),
    "clip-vision-projection": ("CLIPVisionConfig", CLIP, "CLIPVisionModelWithProjection", "hf-clip",
                               ("last_hidden_state", "image_embeds")),
}


def make_model(variant: str) -> torch.nn.Module:
    """A tiny model whose every parameter (layer scales included) is non-trivial."""
    config_class, arguments, model_class, _, _ = VARIANTS[variant]
    torch.manual_seed(0)
    return non_trivial(getattr(transformers, model_class)(getattr(transformers, config_class)(**arguments)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """variant -> (source folder, the model it holds), each built once."""
    return folder_builder(tmp_path_factory, make_model, transformers.BitImageProcessor(
        size={"height": 16, "width": 16}, crop_size={"height": 16, "width": 16}))


def images(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def outputs(model: torch.nn.Module, variant: str) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        result = model(pixel_values=images())
    return {name: result[name] for name in VARIANTS[variant][4]}


def load_model_of(folder: Path, variant: str) -> torch.nn.Module:
    return load_strict(folder, VARIANTS[variant][2])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_read_write_is_bit_identical(variant, built, tmp_path):
    src, model = built(variant)
    out = tmp_path / "out"
    written_back(src, out, VARIANTS[variant][3])
    expected = outputs(model, variant)
    for name, tensor in outputs(load_model_of(out, variant), variant).items():
        assert torch.equal(tensor, expected[name]), name
    # lg's own model of the folder (saved names mapped to transformers' live
    # ones, SwiGLU's weights_in split into gate and up) computes the same.
    mine, _ = lgcli.load_model(out)
    for name, tensor in outputs(mine.eval(), variant).items():
        assert torch.equal(tensor, expected[name]), name


def test_dinov2_roles_entry_by_entry(built):
    src, model = built("dinov2-swiglu-classifier")
    stack = lgcli.load(src).stack
    saved = weights(src)
    layer = "dinov2.encoder.layer.1."
    weights_in, bias_in = saved[layer + "mlp.weights_in.weight"], saved[layer + "mlp.weights_in.bias"]
    # SwiGLU's weights_in rows are gate | up: silu(gate x) * up x.
    assert torch.equal(stack.layers["gate"].data[1], weights_in[:64]) and torch.equal(stack.layers["fc1"].data[1],
                                                                                        weights_in[64:])
    assert torch.equal(stack.layers["gate_bias"].data[1], bias_in[:64])
    assert torch.equal(stack.layers["fc1_bias"].data[1], bias_in[64:])
    assert torch.equal(stack.layers["fc2"].data[1], saved[layer + "mlp.weights_out.weight"])
    assert stack.layers["ls1"].axes == ("layer", "embed")
    assert torch.equal(stack.layers["ls1"].data[1], saved[layer + "layer_scale1.lambda1"])
    assert torch.equal(stack.layers["ls2"].data[0], saved["dinov2.encoder.layer.0.layer_scale2.lambda1"])
    assert torch.equal(stack.layers["q"].data[0], saved["dinov2.encoder.layer.0.attention.attention.query.weight"])
    assert torch.equal(stack.globals["mask_token"].data, saved["dinov2.embeddings.mask_token"])
    # The classifier reads [class token, mean patch token]: its role keeps the two apart.
    head = stack.globals["head_weight"]
    assert head.axes == ("classes", "-", "embed") and head.shape == (10, 2, 48)
    assert torch.equal(head.data[:, 0], model.classifier.weight[:, :48])
    assert torch.equal(head.data[:, 1], model.classifier.weight[:, 48:])


@pytest.mark.parametrize("variant", ["clip-vision", "clip-vision-projection"])
def test_clip_roles_entry_by_entry(variant, built):
    src, model = built(variant)
    stack = lgcli.load(src).stack
    vision = getattr(model, "vision_model", model)  # transformers 5's CLIPVisionModel is the tower itself
    assert torch.equal(stack.globals["cls_token"].data, vision.embeddings.class_embedding)
    assert stack.globals["pos_embed"].axes == ("tokens", "embed")
    assert torch.equal(stack.globals["pos_embed"].data, vision.embeddings.position_embedding.weight)
    assert torch.equal(stack.globals["pre_norm_weight"].data, vision.pre_layrnorm.weight)
    assert torch.equal(stack.globals["fc_norm_bias"].data, vision.post_layernorm.bias)
    assert "patch_embed_bias" not in stack.globals  # CLIP's patch projection has none
    layer = vision.encoder.layers[1]
    assert torch.equal(stack.layers["o"].data[1], layer.self_attn.out_proj.weight)
    assert torch.equal(stack.layers["norm2_weight"].data[1], layer.layer_norm2.weight)
    if variant == "clip-vision-projection":
        assert stack.globals["head_projection_weight"].axes == ("classes", "embed")
        assert torch.equal(stack.globals["head_projection_weight"].data, model.visual_projection.weight)
    else:
        assert "head_projection_weight" not in stack.globals


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inspect_reports_sizes_and_the_load_line(variant, built, lg):
    src, _ = built(variant)
    result = lg("inspect", src, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    _, _, model_class, family, _ = VARIANTS[variant]
    mlp = 64 if "swiglu" in variant else 96
    assert (report["family"], report["depth"], report["width"], report["heads"], report["head_dim"],
            report["mlp_dim"], report["heads_assumed"]) == (family, 2, 48, 2, 24, mlp, False)
    assert (report["architecture"], report["patch_size"], report["img_size"], report["in_chans"]) == (
        model_class, 4, 16, 3)
    assert report["num_classes"] == (10 if "classifier" in variant else None)
    if family == "hf-clip":
        assert report["projection_dim"] == (24 if "projection" in variant else None)
    else:
        assert report["swiglu_ffn"] == ("swiglu" in variant)
    auto = {"Dinov2Model": "AutoModel", "Dinov2ForImageClassification": "AutoModelForImageClassification",
            "Dinov2WithRegistersModel": "AutoModel",
            "Dinov2WithRegistersForImageClassification": "AutoModelForImageClassification",
            "CLIPVisionModel": "AutoModel", "CLIPVisionModelWithProjection": "CLIPVisionModelWithProjection"}
    assert report["load_call"] == f"transformers.{auto[model_class]}.from_pretrained({str(src)!r})"
    loaded = eval(report["load_call"], {"transformers": transformers})
    assert type(loaded).__name__ == model_class
    table = lg("inspect", src)
    assert table.code == 0 and report["load_call"] in table.stdout.decode()


RESIZES = resizes(24, 96)


@pytest.mark.parametrize("resize", sorted(RESIZES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_resized_folder_loads_strictly_and_runs(variant, resize, built, lg, tmp_path):
    src, model = built(variant)
    out = tmp_path / "out"
    config, source_config = resized_configs(lg, src, RESIZES[resize], out)
    depth, width = int(RESIZES[resize][2]), int(RESIZES[resize][4])
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]) == (
        depth, width, width // 24)
    if VARIANTS[variant][3] == "hf-clip":
        assert config["intermediate_size"] == 2 * width
        kept = ("projection_dim", "hidden_act", "layer_norm_eps")
    else:  # DINOv2's MLP is a whole ratio of the width: the source's ratio, kept
        assert config["mlp_ratio"] == 2
        assert (config["stage_names"][-1], config["out_indices"]) == (f"stage{depth}", [depth])
        kept = ("use_swiglu_ffn", "layerscale_value", "id2label")
    unchanged = ("architectures", "model_type", "image_size", "patch_size", "num_channels", *kept)
    assert {k: config.get(k) for k in unchanged} == {k: source_config.get(k) for k in unchanged}
    resized = outputs(load_model_of(out, variant), variant)
    for name, tensor in resized.items():
        assert bool(tensor.isfinite().all()), name
    if resize == "grow-clone":  # a function-preserving expansion: the width is the source's, tiled
        for name, expected in outputs(model, variant).items():
            if name in ("last_hidden_state", "pooler_output"):
                expected = expected.repeat(*[1] * (expected.dim() - 1), width // 48)
            assert torch.allclose(resized[name], expected, atol=1e-5), name


@pytest.mark.parametrize("variant", ["dinov2-swiglu-classifier", "clip-vision-projection"])
def test_a_pipe_between_folders_keeps_the_config(variant, built, lg, tmp_path):
    """`-o -` writes one file (the classifier of 2 x width inputs, the fused
    SwiGLU as saved) whose lg.config is the config.json: the next command
    reads it and writes a folder from_pretrained loads."""
    src, _ = built(variant)
    out = tmp_path / "out"
    config = piped_config(lg, src, out)
    assert (config["num_hidden_layers"], config["architectures"]) == (2, [VARIANTS[variant][2]])
    assert all(tensor.isfinite().all() for tensor in outputs(load_model_of(out, variant), variant).values())


def test_layer_scale_and_the_mask_token_are_resized_along_embed(built, lg, tmp_path):
    """Layer scale is one gain per width unit and layer: select keeps the
    first layers and every other unit, as for every per-layer vector; the
    mask token is a token, selected along its width as the class token is."""
    src, _ = built("dinov2")
    out = tmp_path / "out"
    assert lg("shrink", src, "--depth", "1", "--width", "24", "--method", "select", "-o", out).code == 0
    before, after = weights(src), weights(out)
    for key in ("encoder.layer.0.layer_scale1.lambda1", "encoder.layer.0.layer_scale2.lambda1",
                "embeddings.mask_token"):
        assert torch.equal(after[key], before[key][..., ::2]), key
    assert "encoder.layer.1.layer_scale1.lambda1" not in after


def test_register_tokens_are_read_and_resized_along_embed(built, lg, tmp_path):
    """DINOv2 with registers: the register tokens are the role `reg_token`
    (timm's name), entry by entry, and a width change selects them along
    their width as the class token is (select: every other unit)."""
    src, model = built("dinov2-registers")
    stack = lgcli.load(src).stack
    saved = weights(src)
    assert stack.globals["reg_token"].axes == ("-", "-", "embed")
    assert torch.equal(stack.globals["reg_token"].data, saved["embeddings.register_tokens"])
    assert torch.equal(saved["embeddings.register_tokens"], model.embeddings.register_tokens.detach())
    out = tmp_path / "out"
    assert lg("shrink", src, "--depth", "1", "--width", "24", "--method", "select", "-o", out).code == 0
    after = weights(out)
    for key in ("embeddings.register_tokens", "embeddings.cls_token"):
        assert torch.equal(after[key], saved[key][..., ::2]), key


def test_a_whole_clip_model_is_refused_with_the_way_to_its_vision_tower(built, lg, tmp_path):
    _, vision = built("clip-vision-projection")
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100,
                max_position_embeddings=20, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    config = transformers.CLIPConfig(text_config=text, vision_config=vision.config.to_dict(), projection_dim=24)
    whole = tmp_path / "clip"
    transformers.CLIPModel(config).save_pretrained(whole)
    result = lg("shrink", whole, "--depth", "1", "-o", tmp_path / "out")
    assert result.code == 1
    assert result.stderr == (
        f"lg: error: {whole}: a CLIPModel folder holds a text tower beside the vision tower, and lg resizes the "
        f"vision tower alone: save it as a folder of its own first, with transformers.CLIPVisionModelWithProjection"
        f".from_pretrained(FOLDER).save_pretrained(VISION_FOLDER)\n")
    assert not (tmp_path / "out").exists()
    # What the line says to do gives a folder lg reads.
    tower = tmp_path / "tower"
    transformers.CLIPVisionModelWithProjection.from_pretrained(whole).save_pretrained(tower)
    report = json.loads(lg("inspect", tower, "--json").stdout)
    assert (report["family"], report["architecture"], report["depth"]) == (
        "hf-clip", "CLIPVisionModelWithProjection", 2)


def test_a_clip_vision_model_saved_with_its_prefix_is_read(built, lg, tmp_path):
    """Older transformers saved a CLIPVisionModel under `vision_model.`; lg
    reads that, and writes what save_pretrained writes now."""
    src, model = built("clip-vision")
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_bytes((src / "config.json").read_bytes())
    save_file({f"vision_model.{key}": tensor for key, tensor in weights(src).items()}, str(old / "model.safetensors"),
              metadata={"format": "pt"})
    out = tmp_path / "out"
    assert lg("grow", old, "--depth", "3", "--method", "clone", "-o", out).code == 0
    assert all(not key.startswith("vision_model.") for key in weights(out))
    grown = outputs(load_model_of(out, "clip-vision"), "clip-vision")
    for name, expected in outputs(model, "clip-vision").items():
        assert torch.allclose(grown[name], expected, atol=1e-5), name


def test_a_config_that_disagrees_with_the_weights_is_refused(built, lg, tmp_path):
    src, _ = built("dinov2")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    config = json.loads((src / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "use_swiglu_ffn": True}))
    result = lg("inspect", bad)
    assert (result.code, result.stderr) == (
        1, f"lg: error: {bad}: config.json says use_swiglu_ffn true; the weights have mlp.fc1 (no SwiGLU)\n")
    (bad / "config.json").write_text(json.dumps({**config, "mlp_ratio": 3}))
    result = lg("inspect", bad)
    assert (result.code, result.stderr) == (
        1, f"lg: error: {bad}: config.json says MLP size 144; the weights have 96\n")


def test_an_mlp_size_a_dinov2_config_cannot_state_is_refused(built, lg, tmp_path):
    src, _ = built("dinov2-swiglu-classifier")
    out = tmp_path / "out"
    # Width 64 keeps the source's MLP ratio at 85 units; a SwiGLU's MLP is a multiple of 8.
    result = lg("grow", src, "--width", "64", "--heads", "2", "-o", out)
    assert result.code == 1
    assert result.stderr == ("lg: error: a DINOv2 config.json builds a SwiGLU MLP of two thirds of a whole "
                             "mlp_ratio times the width, rounded up to a multiple of 8: at width 64, MLP 48, 88, "
                             "128, 176, ...; not 85 (give --mlp-dim)\n")
    assert not out.exists()
    assert lg("grow", src, "--width", "64", "--heads", "2", "--mlp-dim", "88", "-o", out).code == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["mlp_ratio"]) == (64, 2)
    load_model_of(out, "dinov2-swiglu-classifier")


@pytest.mark.parametrize("variant", ["dinov2-swiglu-classifier", "dinov2-registers-classifier"])
@pytest.mark.parametrize("command", training_commands("1x24,1x48"))
def test_eval_bench_and_condense_train_these_classifiers(command, variant, built, lg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src, _ = built(variant)
    assert_trained(lg, src, command, tmp_path)


@pytest.mark.parametrize("variant", ["dinov2", "clip-vision"])
@pytest.mark.parametrize("command", training_commands("1x24"))
def test_a_model_of_features_is_refused_in_one_line(command, variant, built, lg, tmp_path, monkeypatch):
    """No head to score: refused before its classes are compared with the data's."""
    monkeypatch.chdir(tmp_path)
    src, _ = built(variant)
    assert_features_refused(lg, src, command, VARIANTS[variant][2], tmp_path)


def test_the_advice_after_writing_a_model_of_features(built, lg, tmp_path):
    src, _ = built("dinov2")
    out = tmp_path / "out"
    result = lg("shrink", src, "--depth", "1", "-o", out)
    assert result.code == 0, result.stderr
    assert "or on lg's: lg eval" not in result.stderr
    assert "fine-tune it with transformers' `Trainer`" in result.stderr and "AutoImageProcessor" in result.stderr
    assert "lg eval" not in (out / "README.md").read_text()


def test_distilling_from_a_model_of_features_is_refused_as_one(built, lg, tmp_path):
    """A Dinov2Model teacher has no head: said so, not as transformers' default 2 labels against the
    student's 10 classes."""
    student, _ = built("dinov2-swiglu-classifier")
    teacher, _ = built("dinov2")
    result = lg("distill", student, "--teacher", teacher, "--data", "fashion-mnist-mini", "--steps", "1",
                "--dry-run")
    assert result.code == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("lg: error: Dinov2Model is a model of features (no classification head)"), result.stderr
    assert "copy the folder's preprocessor_config.json beside it" in line


def zebra_apple_classifier(tmp_path) -> Path:
    """A DINOv2 classifier folder whose id2label names its classes zebra (0) and Apple (1), at 16 px."""
    torch.manual_seed(0)
    config = transformers.Dinov2Config(**DINOV2, num_labels=2, id2label={0: "zebra", 1: "Apple"},
                                       label2id={"zebra": 0, "Apple": 1})
    model_dir = tmp_path / "model"
    transformers.Dinov2ForImageClassification(config).save_pretrained(model_dir)
    transformers.BitImageProcessor(size={"height": 16, "width": 16},
                                   crop_size={"height": 16, "width": 16}).save_pretrained(model_dir)
    return model_dir


def test_an_image_folder_is_numbered_as_the_classifier_names_its_classes(tmp_path):
    """The folder's classes are the model's id2label names (zebra = 0, apple = 1), which sorted order numbers the
    other way: its images are scored as the model numbers them, so the folder named after the labels scores as
    a folder whose sorted order is the model's. Names the model does not have keep the folder's order, said."""
    import numpy as np

    from test_data import write_png

    from lgcli.evaluate import ProbeSettings, evaluate

    model_dir = zebra_apple_classifier(tmp_path)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 4, 16, 16, 3), dtype=np.uint8)
    for folder, names in (("named", ("zebra", "apple")), ("ordered", ("0_z", "1_a")), ("other", ("cat", "dog"))):
        for label, name in enumerate(names):
            for i in range(4):
                write_png(tmp_path / folder / name / f"{i}.png", pixels[label, i])
    notes: list[str] = []

    def scored(folder: str) -> dict:
        report = evaluate([str(model_dir)], str(tmp_path / folder), ProbeSettings(steps=0, progress=False),
                          test_fraction=1, notify=notes.append)
        return report["rows"][0]["final"]

    named, ordered = scored("named"), scored("ordered")
    # The same images, numbered the same way: the same top-1 and loss, entry for entry (the loss to float32's
    # rounding: the folders list their images in other orders, so the batch sums add in other orders).
    assert named.keys() == ordered.keys() and all(
        named[key] == pytest.approx(ordered[key], rel=1e-6, abs=0) for key in named)
    assert any("named's classes numbered as the model names them (id2label): 0 zebra, 1 Apple" in n for n in notes)
    notes.clear()
    scored("other")
    assert any("the model names its classes (zebra, Apple) and other's are others (cat, dog): class i" in n
               for n in notes)


def test_a_folder_of_some_of_the_classifiers_classes_is_scored_on_its_head_and_one_class_of_others_is_refused(
        tmp_path):
    """A folder of the model's classes, or of some of them, is scored on its own head: the two folders of one
    class each add up to the folder of both, entry for entry (images, loss and top-1). One class the model does
    not name would need a new head of one class, which scores 100 % whatever the model computes: refused."""
    import numpy as np

    from test_data import write_png

    from lgcli.evaluate import ProbeSettings, evaluate
    from lgcli.errors import LgError

    model_dir = zebra_apple_classifier(tmp_path)
    pixels = np.random.default_rng(1).integers(0, 256, (2, 4, 16, 16, 3), dtype=np.uint8)
    for label, name in enumerate(("zebra", "apple")):
        for i in range(4):
            for folder in ("both", name, "cat" if label else "unused"):
                write_png(tmp_path / folder / (name if folder != "cat" else "cat") / f"{i}.png", pixels[label, i])
    notes: list[str] = []

    def scored(folder: str) -> dict:
        report = evaluate([str(model_dir)], str(tmp_path / folder), ProbeSettings(steps=0, progress=False),
                          test_fraction=1, notify=notes.append)
        assert not [n for n in report["rows"][0]["notes"] if "head re-initialised" in n]  # the model's own head
        return report["rows"][0]["final"]

    both, zebra, apple = scored("both"), scored("zebra"), scored("apple")
    assert 8 * both["top1"] == pytest.approx(4 * zebra["top1"] + 4 * apple["top1"], abs=1e-6)
    assert 8 * both["loss"] == pytest.approx(4 * zebra["loss"] + 4 * apple["loss"], rel=1e-4)
    assert any("apple's classes numbered as the model names them (id2label): 1 Apple (of its 2)" in n for n in notes)
    with pytest.raises(LgError, match=r"^the data has one class, not the model's 2 classes: a new head for one class "
                                      r"would score 100 % whatever the model computes; give images of two classes"):
        scored("cat")
