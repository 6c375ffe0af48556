"""Hugging Face Swin folders (issue 21, item 2): read on the timm Swin's
stage view and written back bit for bit; every per-stage method writes a
folder from_pretrained loads with nothing missing, unexpected or mismatched,
and that runs; clone keeps the logits; the timm and transformers forms of one
Swin resize to the same weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import lgcli
from hf_image_models import (assert_bare_weights_refused, assert_trained, folder_builder, load_strict,
                             non_trivial, resized_configs, training_commands, weights, written_back)
from lgcli.resize import resize_file
from test_swin import TWO_STAGES, make_swin

# The timm Swin of test_swin.py, as transformers configures it: 2 stages of
# head dim 8, window 4 on a 16 x 16 then 8 x 8 patch grid.
TINY = dict(embed_dim=16, depths=[2, 2], num_heads=[2, 4], image_size=32, patch_size=2, window_size=4,
            num_labels=5)
# variant -> model class
VARIANTS = {"classifier": "SwinForImageClassification", "features": "SwinModel"}


def make_model(variant: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return non_trivial(getattr(transformers, VARIANTS[variant])(transformers.SwinConfig(**TINY)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return folder_builder(tmp_path_factory, make_model, transformers.ViTImageProcessor(
        size={"height": 32, "width": 32}))


def images(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def outputs(model: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """The logits, or a model of features' pooled output."""
    with torch.no_grad():
        out = model(pixel_values=pixels)
    return out.logits if hasattr(out, "logits") else out.pooler_output


def load_swin(folder, variant: str) -> torch.nn.Module:
    return load_strict(folder, VARIANTS[variant])


# ---- timm's form and transformers' -----------------------------------------------

TIMM_BLOCK = {"norm1": "layernorm_before", "attn.proj": "attention.output.dense", "norm2": "layernorm_after",
              "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense",
              "attn.relative_position_bias_table": "attention.self.relative_position_bias_table"}
TIMM_GLOBAL = {"patch_embed.proj": "swin.embeddings.patch_embeddings.projection", "patch_embed.norm":
               "swin.embeddings.norm", "norm": "swin.layernorm", "head.fc": "classifier"}


def hf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A timm Swin state dict under transformers' saved names: qkv split in
    three, the merging before timm's stage i moved to the end of stage i - 1,
    its 4C axis unchanged (the neighbours' orders are the same)."""
    out = {}
    for key, tensor in state.items():
        parts = key.split(".")
        if parts[0] == "layers" and parts[2] == "blocks":
            base, rest = f"swin.encoder.layers.{parts[1]}.blocks.{parts[3]}.", ".".join(parts[4:])
            if rest.startswith("attn.qkv."):
                for name, piece in zip(("query", "key", "value"), tensor.chunk(3)):
                    out[f"{base}attention.self.{name}.{parts[-1]}"] = piece
                continue
            module = rest.rsplit(".", 1)[0] if not rest.endswith("table") else rest
            out[base + TIMM_BLOCK[module] + rest[len(module):]] = tensor
        elif parts[0] == "layers":
            out[f"swin.encoder.layers.{int(parts[1]) - 1}.{'.'.join(parts[2:])}"] = tensor
        else:
            module = key.rsplit(".", 1)[0]
            out[TIMM_GLOBAL[module] + key[len(module):]] = tensor
    return out


@pytest.fixture(scope="module")
def both_forms(tmp_path_factory):
    """One Swin as a timm file and as a transformers folder (converted here)."""
    root = tmp_path_factory.mktemp("forms")
    model = make_swin(**TWO_STAGES)
    timm_file = root / "timm.safetensors"
    lgcli.save_model(model, timm_file)
    folder = root / "hf"
    folder.mkdir()
    transformers.SwinConfig(**TINY, architectures=["SwinForImageClassification"]).save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in hf_names(model.state_dict()).items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    return model, timm_file, folder


def test_the_converted_swin_computes_the_timm_logits(both_forms):
    """The key mapping (the merging's 4 neighbours included) is right: the
    folder from_pretrained loads strictly computes what timm does."""
    model, _, folder = both_forms
    pixels = images()
    with torch.no_grad():
        expected = model(pixels)
    torch.testing.assert_close(outputs(load_strict(folder, "SwinForImageClassification"), pixels), expected,
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("direction,depth,width", [("shrink", (1, 1), 8), ("grow", (3, 2), 32)])
def test_both_forms_resize_to_the_same_weights(both_forms, tmp_path, direction, depth, width):
    _, timm_file, folder = both_forms
    method = "select" if direction == "shrink" else "clone"
    resize_file(timm_file, tmp_path / "timm.safetensors", direction=direction, method=method, depth=depth,
                width=width)
    resize_file(folder, tmp_path / "hf", direction=direction, method=method, depth=depth, width=width)
    from_timm = hf_names(load_file(str(tmp_path / "timm.safetensors")))
    from_hf = weights(tmp_path / "hf")
    assert sorted(from_timm) == sorted(from_hf)
    for key, tensor in from_hf.items():
        assert torch.equal(tensor, from_timm[key]), key


# ---- transformers' folders ----------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_read_write_is_bit_identical(variant, built, tmp_path):
    src, model = built(variant)
    out = tmp_path / "out"
    written_back(src, out, "hf-swin")
    pixels = images()
    assert torch.equal(outputs(load_swin(out, variant), pixels), outputs(model, pixels))
    mine, _ = lgcli.load_model(out)  # lg's own model: saved names mapped to the live ones
    assert torch.equal(outputs(mine.eval(), pixels), outputs(model, pixels))


def test_canonical_roles_are_the_timm_swins(built):
    """Entry by entry: blocks by stage, the merging at the end of
    transformers' stage 0 is stage 1's, as (out, 4, C)."""
    src, model = built("classifier")
    stack = lgcli.load(src).stack
    base = model.swin.encoder.layers
    first, second = stack.stages
    assert torch.equal(first.layers["q"].data[1], base[0].blocks[1].attention.q_proj.weight)
    assert torch.equal(second.layers["fc2"].data[0], base[1].blocks[0].mlp.fc2.weight)
    assert torch.equal(second.layers["rel_pos_bias"].data[1],
                       base[1].blocks[1].attention.relative_position_bias.relative_position_bias_table)
    assert second.layers["rel_pos_bias"].axes == ("layer", "-", "heads")
    merge = second.globals["merge_weight"]
    assert merge.axes == ("embed", "-", "stage_in") and merge.shape == (32, 4, 16)
    assert torch.equal(merge.data.reshape(32, 64), base[0].downsample.reduction.weight)
    assert torch.equal(first.globals["patch_norm_weight"].data, model.swin.embeddings.norm.weight)
    assert torch.equal(second.globals["head_weight"].data, model.classifier.weight)
    assert "merge_weight" not in first.globals and "head_weight" not in first.globals


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_clone_to_the_same_size_keeps_the_outputs(variant, built, lg, tmp_path):
    src, model = built(variant)
    result = lg("grow", src, "--depth", "2,2", "--width", "16", "--method", "clone", "-o", tmp_path / "same")
    assert result.code == 0, result.stderr
    pixels = images()
    torch.testing.assert_close(outputs(load_swin(tmp_path / "same", variant), pixels), outputs(model, pixels),
                               atol=1e-5, rtol=0)


RESIZES = {f"{direction}-{method}": (direction, method) for direction, method in [
    ("shrink", "select"), ("shrink", "bot"), ("shrink", "heur-lg"), ("shrink", "auto-lg"),
    ("grow", "clone"), ("grow", "bot"), ("grow", "heur-lg"), ("grow", "auto-lg")]}
CASES = [("classifier", name) for name in sorted(RESIZES)] + [("features", "shrink-select"),
                                                               ("features", "grow-clone")]


@pytest.mark.parametrize("variant,resize", CASES)
def test_resized_folder_loads_strictly_and_runs(variant, resize, built, lg, tmp_path):
    src, model = built(variant)
    direction, method = RESIZES[resize]
    depths, width = ([1, 1], 8) if direction == "shrink" else ([3, 4], 32)
    args = (direction, "--depth", ",".join(map(str, depths)), "--width", str(width), "--method", method,
            "--seed", "3")
    config, source_config = resized_configs(lg, src, args, tmp_path / "out")
    assert (config["embed_dim"], config["depths"], config["num_heads"], config["hidden_size"]) == (
        width, depths, [width // 8, width // 4], 2 * width)
    unchanged = ("architectures", "model_type", "image_size", "patch_size", "num_channels", "window_size",
                 "mlp_ratio", "id2label")
    assert {k: config[k] for k in unchanged} == {k: source_config[k] for k in unchanged}
    resized = load_swin(tmp_path / "out", variant)
    assert [len(stage.blocks) for stage in resized.base_model.encoder.layers] == depths
    out = outputs(resized, images())
    assert out.shape == (2, 5 if variant == "classifier" else 2 * width) and bool(out.isfinite().all())


def test_clone_wider_and_deeper_on_top_keeps_the_logits(built, lg, tmp_path):
    """Identity blocks on top of each stage (between two, they would change
    which blocks shift their windows: test_swin.py)."""
    src, model = built("classifier")
    result = lg("grow", src, "--depth", "4,4", "--width", "32", "--method", "clone", "--insert", "top",
                "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    pixels = images()
    torch.testing.assert_close(outputs(load_swin(tmp_path / "out", "classifier"), pixels), outputs(model, pixels),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inspect_shows_the_stages_and_the_load_line(variant, built, lg):
    src, _ = built(variant)
    result = lg("inspect", src, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["family"], report["architecture"], report["window_size"], report["img_size"]) == (
        "hf-swin", VARIANTS[variant], 4, 32)
    assert [(s["depth"], s["width"], s["heads"]) for s in report["stages"]] == [(2, 16, 2), (2, 32, 4)]
    auto = "AutoModelForImageClassification" if variant == "classifier" else "AutoModel"
    assert report["load_call"] == f"transformers.{auto}.from_pretrained({str(src)!r})"
    assert type(eval(report["load_call"], {"transformers": transformers})).__name__ == VARIANTS[variant]
    table = lg("inspect", src)
    assert table.code == 0 and "stages" in table.stdout.decode()
    assert report["load_call"] in table.stdout.decode()


def test_inspect_of_a_folder_does_not_import_torch(built):
    src, _ = built("classifier")
    probe = ("import sys\nfrom lgcli.cli import main\ntry:\n    main(['inspect', sys.argv[1]])\n"
             "except SystemExit as exc:\n    assert not exc.code\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe, str(src)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


def test_weights_without_their_config_are_refused(built, lg, tmp_path):
    assert_bare_weights_refused(lg, built("classifier")[0], tmp_path, "swin")


@pytest.mark.parametrize("field,value,message", [
    ("window_size", 3, "config.json says window_size 3; the position tables are of windows [4]"),
    ("depths", [2, 1], "config.json says depths [2, 1]; the weights have [2, 2]"),
    ("embed_dim", 8, "config.json says embed_dim 8; the weights have 16"),
    ("use_absolute_embeddings", True, "config.json: use_absolute_embeddings is true: lg reads Swins without "
                                      "absolute position embeddings (transformers' default)")])
def test_a_config_that_disagrees_with_the_weights_is_refused(built, lg, tmp_path, field, value, message):
    src, _ = built("classifier")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    config = json.loads((src / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, field: value}))
    result = lg("inspect", bad)
    assert result.code == 1
    assert result.stderr.strip() == f"lg: error: {bad}: {message}"


@pytest.mark.parametrize("command", training_commands("1x16"))
def test_eval_bench_and_condense_train_a_hugging_face_swin(command, built, lg, tmp_path, monkeypatch):
    """Through transformers' own forward pass (images in, `logits` out); a
    TLEG learngene of it is one per stage (tests/test_swin_learngenes.py)."""
    monkeypatch.chdir(tmp_path)
    # The data's 10 classes: condensing distils the model's logits, class for class.
    src = tmp_path / "swin10"
    torch.manual_seed(0)
    transformers.SwinForImageClassification(transformers.SwinConfig(**{**TINY, "num_labels": 10})).save_pretrained(src)
    assert_trained(lg, src, command, tmp_path)
