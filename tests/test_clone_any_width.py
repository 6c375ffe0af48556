"""clone at widths that are no whole multiple (lgcli/methods/clone.py): MLP
neurons and heads copied with their copies divided on the input side, the
residual width padded with channels no norm sees (LEMON). Each rule checked
entry by entry on hand-made tensors; the source's outputs kept by the models
written, in timm and transformers, loaded strictly; the families whose
norms cannot ignore new channels refused in one line, and the grow default
falling back there."""

from __future__ import annotations

import json
import math

import pytest
import torch

import lgcli
from lgcli.errors import LgError
from lgcli.methods.clone import copies, validate, widen
from lgcli.resize import resize_file
from lgcli.stack import ArchSpec, Named

from conftest import make_vit, sample_input
from text_models import Sources, load_strict, outputs, relative_error, token_ids


def spec(width: int = 2, mlp: int = 2, heads: int = 1, **flags) -> ArchSpec:
    return ArchSpec("vit", depth=1, width=width, heads=heads, head_dim=width // heads, mlp_dim=mlp, **flags)


def test_copies_maps_target_indices_to_source_indices_modulo_the_source_size():
    index, count = copies(3, 7)
    assert index.tolist() == [0, 1, 2, 0, 1, 2, 0] and count.tolist() == [3, 2, 2]


def test_an_mlp_neuron_copied_twice_has_its_output_column_halved_and_the_others_kept():
    fc1 = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])      # (layer, mlp, embed): 2 neurons
    fc2 = torch.tensor([[[5.0, 6.0], [7.0, 8.0]]])      # (layer, embed, mlp)
    source, target = spec(mlp=2), spec(mlp=3)
    grown_fc1 = widen(Named(fc1, ("layer", "mlp", "embed")), source, target, "fc1")
    grown_fc2 = widen(Named(fc2, ("layer", "embed", "mlp")), source, target, "fc2")
    assert grown_fc1.tolist() == [[[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]]]   # neuron 0 once more
    assert grown_fc2.tolist() == [[[2.5, 6.0, 2.5], [3.5, 8.0, 3.5]]]     # its two copies share its column


def test_the_residual_width_is_padded_with_the_mean_for_layernorm_and_zero_for_rmsnorm():
    o = torch.tensor([[[1.0], [3.0]]])                  # (layer, embed, attn): writes 2 channels
    norm = torch.tensor([[2.0, 4.0]])
    bias = torch.tensor([[0.5, -0.5]])
    q = torch.tensor([[[1.0, 2.0]]])                    # (layer, attn, embed): reads them
    source = ArchSpec("vit", 1, 2, 1, 1, 2)             # one head of dimension 1, kept
    target = ArchSpec("vit", 1, 3, 1, 1, 2)
    root = math.sqrt(2 / 3)
    torch.testing.assert_close(widen(Named(o, ("layer", "embed", "attn")), source, target, "o"),
                               torch.tensor([[[1.0], [3.0], [2.0]]]) / root)   # s = sqrt(3 / 2) times
    torch.testing.assert_close(widen(Named(norm, ("layer", "embed")), source, target, "norm1_weight"),
                               torch.tensor([[2.0 * root, 4.0 * root, 2.0 * root]]))
    assert widen(Named(bias, ("layer", "embed")), source, target, "norm1_bias").tolist() == [[0.5, -0.5, 0.0]]
    assert widen(Named(q, ("layer", "attn", "embed")), source, target, "q").tolist() == [[[1.0, 2.0, 1.0]]]
    rms_source = ArchSpec("llama", 1, 2, 1, 1, 2, rms_norm=True)
    rms_target = ArchSpec("llama", 1, 3, 1, 1, 2, rms_norm=True)
    torch.testing.assert_close(widen(Named(o, ("layer", "embed", "attn")), rms_source, rms_target, "o"),
                               torch.tensor([[[1.0], [3.0], [0.0]]]) / root)


def test_a_layer_scaled_branch_writes_the_mean_of_scale_times_output_under_a_scale_of_one():
    o = torch.tensor([[[1.0], [3.0]]])
    scale = torch.tensor([[2.0, 10.0]])
    source, target = ArchSpec("vit", 1, 2, 1, 1, 2), ArchSpec("vit", 1, 3, 1, 1, 2)
    torch.testing.assert_close(widen(Named(o, ("layer", "embed", "attn")), source, target, "o", scale),
                               torch.tensor([[[1.0], [3.0], [16.0]]]) * math.sqrt(3 / 2))  # (2 * 1 + 10 * 3) / 2
    assert widen(Named(scale, ("layer", "embed")), source, target, "ls1").tolist() == [[2.0, 10.0, 1.0]]


@pytest.mark.parametrize("flags, reason", [
    (dict(post_norm=True), "whose blocks normalise after the residual sum"),
    (dict(normed_input=True), "whose residual stream starts at a norm's output"),
    (dict(stage_input=32), "patch merging"),
])
def test_a_padded_width_is_refused_where_a_norm_would_see_the_new_channels(flags, reason):
    with pytest.raises(LgError, match=reason):
        validate(spec(width=64, heads=2, **flags), spec(width=96, heads=3, **flags))
    validate(spec(width=64, heads=2, **flags), spec(width=128, heads=4, **flags))  # tiled: kept


def test_clone_never_shrinks_an_axis():
    with pytest.raises(LgError, match="clone only grows: mlp 256 -> 128"):
        validate(spec(width=64, heads=2, mlp=256), spec(width=64, heads=2, mlp=128))


# ---------------------------------------------------------------- timm


VARIANTS = ["cls-token", "layer-scale", "register-tokens", "qk-norm", "avg-pool-no-cls", "cls-with-fc-norm",
            "no-embed-class", "no-qkv-bias", "distilled"]
SIZES = {"width x1.5": dict(width=96, heads=3), "width x2.5, deeper": dict(width=160, heads=5, depth=3),
         "mlp only": dict(mlp_dim=300)}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("growth", sorted(SIZES))
def test_a_timm_vit_grown_to_any_width_gives_the_source_logits(variant, growth, tmp_path):
    overrides = dict(depth=2, embed_dim=64, num_heads=4 if variant == "qk-norm" else 2)
    if variant == "qk-norm" and "heads" in SIZES[growth]:
        sizes = {**SIZES[growth], "heads": SIZES[growth]["width"] // 16}
    else:
        sizes = SIZES[growth]
    model = make_vit(variant, **overrides).eval()
    src, out = tmp_path / "src.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(model, src)
    report = resize_file(src, out, direction="grow", method="clone", **sizes)
    assert report["details"]["new_channels"] == ("copies" if "width" not in sizes else "mean")
    grown = eval(lgcli.inspect_checkpoint(out)["load_call"], {"timm": __import__("timm")}).eval()
    assert grown.embed_dim == sizes.get("width", 64)
    x = sample_input(model)
    with torch.no_grad():
        expected, got = model(x), grown(x)
    assert torch.linalg.vector_norm(got - expected) <= 1e-5 * torch.linalg.vector_norm(expected)


def test_a_beit_grown_to_any_width_gives_the_source_logits(tmp_path):
    """BEiT: layer scale, a relative position bias per head, q and v biases."""
    from test_timm_family_beit import images, make_beit, printed_model

    model = make_beit().eval()   # 3 x 32, 2 heads of 16
    src, out = tmp_path / "beit.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(model, src)
    report = resize_file(src, out, direction="grow", method="clone", width=48, depth=4)
    assert report["details"]["new_channels"] == "mean"
    grown = printed_model(out).eval()
    assert grown.embed_dim == 48 and len(grown.blocks) == 4
    x = images()
    with torch.no_grad():
        expected, got = model(x), grown(x)
    assert torch.linalg.vector_norm(got - expected) <= 1e-5 * torch.linalg.vector_norm(expected)


def test_the_grow_default_clones_any_width_and_falls_back_where_clone_cannot_reach(tmp_path):
    """docs/methods.md "Defaults": a plain ViT grown to 96 wide is cloned (its
    logits kept); one with norm_pre (its stream starts at a norm) gets the
    fallback, auto-lg, said in the report."""
    for variant, method in (("cls-token", "clone"), ("pre-norm", "auto-lg")):
        model = make_vit(variant, depth=2, embed_dim=64, num_heads=2).eval()
        src = tmp_path / f"{variant}.safetensors"
        lgcli.save_model(model, src)
        report = resize_file(src, tmp_path / f"{variant}-96.safetensors", direction="grow", width=96, heads=3)
        assert report["method"] == method


def test_a_vit_with_norm_pre_is_refused_in_one_line(tmp_path, lg):
    src = tmp_path / "pre.safetensors"
    lgcli.save_model(make_vit("pre-norm", depth=2, embed_dim=64, num_heads=2), src)
    out = tmp_path / "out.safetensors"
    result = lg("grow", src, "--width", "96", "--method", "clone", "-o", out)
    assert result.code != 0 and result.stderr.count("\n") == 1, result.stderr
    assert "clone grows width by whole multiples on this model, whose residual stream starts at a norm's output: " \
           "64 -> 96 is not one (valid widths: 64, 128, 192, 256, ...)" in result.stderr
    assert not out.exists()


# ---------------------------------------------------------------- transformers


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return Sources(tmp_path_factory)


TEXT_VARIANTS = ["gpt2-lm", "llama-mha", "llama-gqa", "llama-tied", "qwen2", "mistral", "llama-biases"]
TEXT_SIZES = {"48": ["--width", "48"], "80-deeper": ["--width", "80", "--depth", "4"]}


@pytest.mark.parametrize("variant", TEXT_VARIANTS)
@pytest.mark.parametrize("growth", sorted(TEXT_SIZES))
def test_a_text_model_grown_to_any_width_gives_the_source_logits(variant, growth, sources, lg, tmp_path):
    src, model = sources(variant)
    out = tmp_path / "out"
    result = lg("grow", src, *TEXT_SIZES[growth], "--json", "-o", out)   # the grow default: clone
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["method"] == "clone"
    grown = load_strict(out, variant)
    assert grown.config.hidden_size == int(TEXT_SIZES[growth][1])
    ids = token_ids()
    assert relative_error(outputs(grown, ids), outputs(model, ids)) <= 1e-5


def test_bert_is_refused_a_padded_width(sources, lg, tmp_path):
    src, _ = sources("bert-mlm")
    result = lg("grow", src, "--width", "48", "--method", "clone", "-o", tmp_path / "out")
    assert result.code != 0 and result.stderr.count("\n") == 1
    assert "whose blocks normalise after the residual sum: 32 -> 48 is not one" in result.stderr
    assert not (tmp_path / "out").exists()


DINOV2 = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=16, patch_size=4)
IMAGE_VARIANTS = {
    "dinov2": ("Dinov2Config", DINOV2, "Dinov2Model", "last_hidden_state"),
    "dinov2-swiglu-classifier": ("Dinov2Config", dict(DINOV2, use_swiglu_ffn=True, num_labels=10),
                                 "Dinov2ForImageClassification", "logits"),
    "dinov2-registers": ("Dinov2WithRegistersConfig", dict(DINOV2, num_register_tokens=3),
                         "Dinov2WithRegistersModel", "pooler_output"),
    "vit-classifier": ("ViTConfig", dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=96, image_size=16, patch_size=4, num_labels=10),
                       "ViTForImageClassification", "logits"),
}


@pytest.mark.parametrize("variant", sorted(IMAGE_VARIANTS))
def test_a_hugging_face_image_model_grown_to_any_width_keeps_its_outputs(variant, tmp_path, lg):
    """72 wide from 48 (heads of 24): DINOv2's layer scale, registers and
    SwiGLU, and a ViT classifier; the outputs on the old channels are the
    source's (a hidden state's new channels hold the mean of its old ones)."""
    import transformers

    from hf_image_models import load_strict as load_image, non_trivial

    config_class, arguments, model_class, output = IMAGE_VARIANTS[variant]
    torch.manual_seed(0)
    model = non_trivial(getattr(transformers, model_class)(getattr(transformers, config_class)(**arguments))).eval()
    src, out = tmp_path / "src", tmp_path / "out"
    model.save_pretrained(src)
    transformers.BitImageProcessor(size={"height": 16, "width": 16},
                                   crop_size={"height": 16, "width": 16}).save_pretrained(src)
    result = lg("grow", src, "--width", "72", "--method", "clone", "-o", out)
    assert result.code == 0, result.stderr
    grown = load_image(out, model_class).eval()
    assert grown.config.hidden_size == 72
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = model(pixel_values=pixels)[output], grown(pixel_values=pixels)[output]
    if output != "logits":
        got = got[..., :48]   # the old channels (the final norm's new ones are 0)
    assert torch.linalg.vector_norm(got - expected) <= 1e-5 * torch.linalg.vector_norm(expected)


def test_clip_and_swin_are_refused_a_padded_width_and_keep_their_tiling(tmp_path):
    """CLIP's stream starts at its pre-LayerNorm, a Swin's first stage at its
    patch norm (and later stages at a patch merging): new channels would
    change what those norms compute, so clone keeps to whole multiples."""
    import transformers

    from test_swin import make_swin

    clip = tmp_path / "clip"
    transformers.CLIPVisionModel(transformers.CLIPVisionConfig(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, image_size=16,
        patch_size=4)).save_pretrained(clip)
    transformers.BitImageProcessor(size={"height": 16, "width": 16},
                                   crop_size={"height": 16, "width": 16}).save_pretrained(clip)
    swin = tmp_path / "swin.safetensors"
    lgcli.save_model(make_swin(), swin)
    assert lgcli.load(clip).spec.normed_input
    assert [stage.normed_input for stage in lgcli.load(swin).spec.stages] == [True, False]
    for source, width, said in ((clip, 72, "whose residual stream starts at a norm's output: 48 -> 72"),
                                (swin, 24, "stage 0: clone grows width by whole multiples on this model, "
                                           "whose residual stream starts at a norm's output: 16 -> 24")):
        with pytest.raises(LgError, match=said):
            resize_file(source, tmp_path / "out", direction="grow", method="clone", width=width)
        assert not (tmp_path / "out").exists()
