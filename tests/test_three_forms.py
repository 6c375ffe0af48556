"""One ViT in its three forms (issue 21, item 3): a timm single file, a timm
hub folder (`timm.models.save_for_hf`), and a Hugging Face
ViTForImageClassification folder converted here from the same timm weights.
Each method that does not draw random weights, at the same size, gives the
same tensors from all three, compared key by key once the Hugging Face names
are mapped back to timm's.

Inherent differences, none of them in the weights: transformers' ViTConfig
defaults to layer_norm_eps 1e-12 where timm uses 1e-6 (a config field: the
converted folder sets 1e-6, so that its logits are timm's); heur-lg and
auto-lg draw their new layers from each library's own initialisation (timm's
and transformers' differ), so they are left out here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from timm.models import save_for_hf

from conftest import make_vit, sample_input, write_plain

HEADS = 4  # of dimension 16: given to the single file, which cannot say it (the folders' configs do)


def timm_to_hf_vit(model: torch.nn.Module, folder: Path) -> None:
    """A ViTForImageClassification folder holding a timm ViT's weights:
    timm's fused qkv rows are (q | k | v) blocks; everything else is renamed."""
    sd = {key: tensor.detach().clone() for key, tensor in model.state_dict().items()}
    width, depth = model.embed_dim, len(model.blocks)
    state = {
        "vit.embeddings.cls_token": sd["cls_token"],
        "vit.embeddings.position_embeddings": sd["pos_embed"],
        "vit.embeddings.patch_embeddings.projection.weight": sd["patch_embed.proj.weight"],
        "vit.embeddings.patch_embeddings.projection.bias": sd["patch_embed.proj.bias"],
        "vit.layernorm.weight": sd["norm.weight"], "vit.layernorm.bias": sd["norm.bias"],
        "classifier.weight": sd["head.weight"], "classifier.bias": sd["head.bias"],
    }
    renamed = {"norm1": "layernorm_before", "attn.proj": "attention.output.dense", "norm2": "layernorm_after",
               "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense"}
    for i in range(depth):
        hf, timm = f"vit.encoder.layer.{i}.", f"blocks.{i}."
        for kind in ("weight", "bias"):
            for part, tensor in zip(("query", "key", "value"), sd[f"{timm}attn.qkv.{kind}"].chunk(3)):
                state[f"{hf}attention.attention.{part}.{kind}"] = tensor.contiguous()
            for old, new in renamed.items():
                state[f"{hf}{new}.{kind}"] = sd[f"{timm}{old}.{kind}"]
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    transformers.ViTConfig(
        hidden_size=width, num_hidden_layers=depth, num_attention_heads=HEADS,
        intermediate_size=model.blocks[0].mlp.fc1.out_features, image_size=model.patch_embed.img_size[0],
        patch_size=model.patch_embed.patch_size[0], num_channels=3, num_labels=model.num_classes,
        hidden_act="gelu", layer_norm_eps=1e-6, architectures=["ViTForImageClassification"],
    ).save_pretrained(folder)


def hf_vit_to_timm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `timm_to_hf_vit` on a state dict: query, key and value fused back into qkv."""
    out = {"cls_token": state.pop("vit.embeddings.cls_token"),
           "pos_embed": state.pop("vit.embeddings.position_embeddings"),
           "head.weight": state.pop("classifier.weight"), "head.bias": state.pop("classifier.bias")}
    renamed = {"embeddings.patch_embeddings.projection": "patch_embed.proj", "layernorm_before": "norm1",
               "attention.output.dense": "attn.proj", "layernorm_after": "norm2", "intermediate.dense": "mlp.fc1",
               "output.dense": "mlp.fc2", "layernorm": "norm"}
    layers = {key.split(".")[3] for key in state if key.startswith("vit.encoder.layer.")}
    for i in sorted(layers):
        hf = f"vit.encoder.layer.{i}.attention.attention."
        for kind in ("weight", "bias"):
            out[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([state.pop(f"{hf}{part}.{kind}")
                                                            for part in ("query", "key", "value")])
    for key, tensor in state.items():
        name = key.removeprefix("vit.").replace("encoder.layer.", "blocks.")
        for old, new in renamed.items():
            name = name.replace(f"{old}.", f"{new}.")
        out[name] = tensor
    return out


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    """form -> its path, and the timm model they all hold."""
    root = tmp_path_factory.mktemp("forms")
    model = make_vit("cls-token", model_name="vit_tiny_patch16_224", num_heads=HEADS)
    single = write_plain(model, root / "vit.safetensors")
    timm_folder = root / "timm"
    save_for_hf(model, str(timm_folder), safe_serialization=True)
    hf_folder = root / "hf"
    timm_to_hf_vit(model, hf_folder)
    return {"timm-file": single, "timm-folder": timm_folder, "hf-folder": hf_folder}, model


def test_the_conversion_is_the_same_model(forms):
    """The Hugging Face folder computes the timm model's logits: the
    conversion written above maps every tensor where transformers reads it."""
    paths, model = forms
    hf, info = transformers.ViTForImageClassification.from_pretrained(paths["hf-folder"], output_loading_info=True)
    assert not any(info.values()), info
    x = sample_input(model)
    with torch.no_grad():
        assert torch.allclose(hf.eval()(pixel_values=x).logits, model(x), atol=1e-5)


RESIZES = {
    "shrink-select": ("shrink", "--depth", "1", "--width", "32", "--method", "select"),
    "shrink-bot": ("shrink", "--depth", "1", "--width", "32", "--method", "bot"),
    "grow-bot": ("grow", "--depth", "3", "--width", "128", "--method", "bot"),
    "grow-clone": ("grow", "--depth", "3", "--width", "128", "--method", "clone"),
}


@pytest.mark.parametrize("resize", sorted(RESIZES))
def test_the_three_forms_resize_to_the_same_tensors(resize, forms, lg, tmp_path):
    paths, _ = forms
    command, *rest = RESIZES[resize]
    outputs = {"timm-file": tmp_path / "one.safetensors", "timm-folder": tmp_path / "timm",
               "hf-folder": tmp_path / "hf"}
    for form, path in paths.items():
        heads = ("--source-heads", str(HEADS)) if form == "timm-file" else ()
        result = lg(command, path, *rest, *heads, "-o", outputs[form])
        assert result.code == 0, f"{form}: {result.stderr}"
    resized = {"timm-file": load_file(str(outputs["timm-file"])),
               "timm-folder": load_file(str(outputs["timm-folder"] / "model.safetensors")),
               "hf-folder": hf_vit_to_timm_names(load_file(str(outputs["hf-folder"] / "model.safetensors")))}
    reference = resized["timm-file"]
    for form in ("timm-folder", "hf-folder"):
        assert sorted(resized[form]) == sorted(reference), form
        for key, tensor in reference.items():
            assert tensor.dtype == resized[form][key].dtype and torch.equal(tensor, resized[form][key]), (form, key)
    config = json.loads((outputs["hf-folder"] / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (int(rest[1]), int(rest[3]))
