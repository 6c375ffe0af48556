"""Hugging Face ViT and DeiT folders in and out: read into the canonical
Stack and written back bit for bit; inspect reports their sizes; every
training-free resize writes a folder that from_pretrained loads with nothing
missing, unexpected or mismatched, and that runs; clone keeps the logits."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import lgcli
from hf_image_models import (assert_bare_weights_refused, assert_trained, folder_builder, load_strict,
                             non_trivial, piped_config, resized_configs, resizes, training_commands, written_back)

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16,
            patch_size=4, num_labels=10)
# variant -> (config class, model class, channels, lg family)
VARIANTS = {
    "vit": ("ViTConfig", "ViTForImageClassification", 3, "hf-vit"),
    "vit-grayscale": ("ViTConfig", "ViTForImageClassification", 1, "hf-vit"),
    "deit": ("DeiTConfig", "DeiTForImageClassification", 3, "hf-deit"),
    "deit-with-teacher": ("DeiTConfig", "DeiTForImageClassificationWithTeacher", 3, "hf-deit"),
}


def make_model(variant: str) -> torch.nn.Module:
    """A tiny model whose every parameter is non-trivial."""
    config_class, model_class, channels, _ = VARIANTS[variant]
    config = getattr(transformers, config_class)(**TINY, num_channels=channels)
    torch.manual_seed(0)
    return non_trivial(getattr(transformers, model_class)(config))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """variant -> (source folder, the model it holds), each built once."""
    def processor(variant: str):
        channels = VARIANTS[variant][2]  # one mean and std per channel the model takes
        return transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5] * channels,
                                              image_std=[0.5] * channels)

    return folder_builder(tmp_path_factory, make_model, processor)


def images(channels: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(2, channels, 16, 16, generator=generator)


def logits(model: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(pixel_values=pixels).logits


def load_vit(folder, variant: str) -> torch.nn.Module:
    return load_strict(folder, VARIANTS[variant][1])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_read_write_is_bit_identical(variant, built, tmp_path):
    src, model = built(variant)
    out = tmp_path / "out"
    written_back(src, out, VARIANTS[variant][3])
    pixels = images(VARIANTS[variant][2])
    assert torch.equal(logits(load_vit(out, variant), pixels), logits(model, pixels))
    # lg's own model of the folder (saved names mapped to transformers' live ones) computes the same.
    mine, _ = lgcli.load_model(out)
    assert torch.equal(logits(mine.eval(), pixels), logits(model, pixels))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_canonical_roles_are_the_timm_vits(variant, built):
    src, model = built(variant)
    loaded = lgcli.load(src)
    stack, base = loaded.stack, model.base_model
    attention = base.layers[1].attention
    assert torch.equal(stack.layers["q"].data[1], attention.q_proj.weight)
    assert torch.equal(stack.layers["v_bias"].data[1], attention.v_proj.bias)
    assert torch.equal(stack.layers["fc2"].data[0], base.layers[0].mlp.fc2.weight)
    assert torch.equal(stack.layers["norm1_weight"].data[0], base.layers[0].layernorm_before.weight)
    assert torch.equal(stack.layers["norm2_bias"].data[1], base.layers[1].layernorm_after.bias)
    assert torch.equal(stack.globals["cls_token"].data, base.embeddings.cls_token)
    assert stack.layers["fc1"].axes == ("layer", "mlp", "embed")
    assert torch.equal(stack.globals["pos_embed"].data, base.embeddings.position_embeddings)
    assert ("dist_token" in stack.globals) == variant.startswith("deit")
    assert ("head_dist_weight" in stack.globals) == (variant == "deit-with-teacher")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inspect_reports_sizes_and_the_load_line(variant, built, lg):
    src, _ = built(variant)
    result = lg("inspect", src, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    _, model_class, channels, family = VARIANTS[variant]
    assert (report["family"], report["depth"], report["width"], report["heads"], report["head_dim"],
            report["mlp_dim"], report["heads_assumed"]) == (family, 2, 32, 2, 16, 64, False)
    assert (report["architecture"], report["patch_size"], report["img_size"], report["in_chans"],
            report["num_classes"]) == (model_class, 4, 16, channels, 10)
    loaded = eval(report["load_call"], {"transformers": transformers})
    assert type(loaded).__name__ == model_class


RESIZES = resizes(16, 64)


@pytest.mark.parametrize("resize", sorted(RESIZES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_resized_folder_loads_strictly_and_runs(variant, resize, built, lg, tmp_path):
    src, model = built(variant)
    out = tmp_path / "out"
    config, source_config = resized_configs(lg, src, RESIZES[resize], out)
    depth, width = int(RESIZES[resize][2]), int(RESIZES[resize][4])
    sizes = (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"])
    assert sizes == (depth, width, 2 * width)
    assert width % config["num_attention_heads"] == 0
    unchanged = ("architectures", "model_type", "image_size", "patch_size", "num_channels", "id2label")
    assert {k: config[k] for k in unchanged} == {k: source_config[k] for k in unchanged}
    resized = load_vit(out, variant)
    pixels = images(VARIANTS[variant][2])
    out_logits = logits(resized, pixels)
    assert out_logits.shape == (2, 10) and bool(out_logits.isfinite().all())
    if resize == "grow-clone":  # a function-preserving expansion
        assert torch.allclose(out_logits, logits(model, pixels), atol=1e-5)


def test_config_that_disagrees_with_the_weights_is_refused(built, lg, tmp_path):
    src, _ = built("vit")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    config = json.loads((src / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "image_size": 32}))
    result = lg("inspect", bad)
    assert result.code == 1
    assert result.stderr.strip() == (f"lg: error: {bad}: config.json's image_size 32 and patch_size 4 make 65 "
                                     f"position embeddings; the weights have 17")


@pytest.mark.parametrize("variant", ["vit", "deit-with-teacher"])
def test_a_pipe_between_folders_keeps_the_config(variant, built, lg, tmp_path):
    """`-o -` writes one file whose lg.config is the config.json: the next
    command reads it and writes a folder from_pretrained loads."""
    src, _ = built(variant)
    out = tmp_path / "out"
    config = piped_config(lg, src, out)
    assert (config["num_hidden_layers"], config["architectures"]) == (2, [VARIANTS[variant][1]])
    assert logits(load_vit(out, variant), images(3)).shape == (2, 10)


def test_weights_without_their_config_are_refused(built, lg, tmp_path):
    assert_bare_weights_refused(lg, built("vit")[0], tmp_path, "vit")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_config_alone_gives_the_model_its_sizes(variant, built):
    """What a learngene's recorded config.json is expanded from: the spec and
    every role's shape, with no weights, and the parameter count of the model
    transformers builds."""
    src, model = built(variant)
    adapter = lgcli.api.get_adapter(VARIANTS[variant][3])
    spec, stack = adapter.template_from_config(json.loads((src / "config.json").read_text()))
    assert (spec.depth, spec.width, spec.heads, spec.mlp_dim) == (2, 32, 2, 64)
    assert stack.layers["q"].data.device.type == "meta"
    assert adapter.parameter_count(spec) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("variant", ["vit-grayscale", "deit-with-teacher"])
@pytest.mark.parametrize("command", training_commands("1x16,1x32"))
def test_eval_bench_and_condense_train_a_hugging_face_classifier(command, variant, built, lg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src, _ = built(variant)
    assert_trained(lg, src, command, tmp_path)


def test_a_learngene_of_a_hugging_face_vit_grows_into_a_folder_transformers_loads(built, lg, tmp_path):
    """TLEG condensed through the transformers model's own forward pass (its
    saved names mapped to the live ones), grown into a ViT folder."""
    src, _ = built("vit-grayscale")
    gene, out = tmp_path / "tleg.safetensors", tmp_path / "grown"
    condensed = lg("condense", src, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2", "--subset",
                   "64", "--test-subset", "32", "-o", gene)
    assert condensed.code == 0, condensed.stderr
    assert lg("grow", gene, "--depth", "3", "-o", out).code == 0
    model = load_vit(out, "vit-grayscale")
    assert model.config.num_hidden_layers == 3
    assert logits(model, images(1)).shape == (2, 10)


def test_a_new_head_for_the_datas_classes(built):
    """A classifier of other classes gets a new head (seeded), its config's
    labels to match: the bench and eval figures are then of the data's classes."""
    import copy

    from lgcli.heads import classes_of, reset_head

    model = copy.deepcopy(built("deit-with-teacher")[1])  # the fixture's model stays as built
    assert classes_of(model) == 10
    reset_head(model, 4)
    assert classes_of(model) == 4 and model.config.num_labels == 4
    assert model.cls_classifier.out_features == model.distillation_classifier.out_features == 4
    assert logits(model, images(3)).shape == (2, 4)


def test_the_advice_after_a_write_names_the_image_processor(built, lg, tmp_path):
    """A transformers image classifier is scored by lg eval (stderr and the
    card say so), and fine-tuned with transformers' Trainer on images its
    image processor prepares: not tokenizer files, which it has none of."""
    src, _ = built("vit")
    out = tmp_path / "out"
    result = lg("shrink", src, "--depth", "1", "-o", out)
    assert result.code == 0, result.stderr
    assert "or on lg's: lg eval" in result.stderr and "--data fashion-mnist-mini --steps 100" in result.stderr
    card = (out / "README.md").read_text()
    assert "lg eval" in card and "tokenizer" not in card and "AutoImageProcessor" in card
