"""timm hub folders (issue 21): the folder `timm.models.save_for_hf` writes
(config.json with `architecture`, `model_args`, `pretrained_cfg`, and
model.safetensors) is read with the sizes its config gives, and a resize of
one is written as one, which `timm.create_model('local-dir:OUT',
pretrained=True)` loads strictly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from timm.models import save_for_hf

from conftest import make_vit, sample_input, write_plain

# Four heads of dimension 16: the ViT convention (heads of 64) would guess one,
# so a report of 4 heads shows the count came from config.json.
HEADS = 4


@pytest.fixture
def source_model() -> torch.nn.Module:
    return make_vit("cls-token", model_name="vit_tiny_patch16_224", num_heads=HEADS)


@pytest.fixture
def timm_folder(source_model, tmp_path) -> Path:
    folder = tmp_path / "vit_tiny_hub"
    save_for_hf(source_model, str(folder), safe_serialization=True)  # timm's own writer
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    return folder


def load_local_dir(folder: Path) -> torch.nn.Module:
    """The folder as timm loads it (pretrained=True loads strictly), in eval mode."""
    return timm.create_model(f"local-dir:{folder}", pretrained=True).eval()


def test_inspect_reads_sizes_and_heads_from_config(timm_folder, lg):
    result = lg("inspect", timm_folder, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["family"], report["depth"], report["width"], report["heads"]) == ("vit", 2, 64, HEADS)
    assert report["heads_assumed"] is False
    assert (report["img_size"], report["patch_size"], report["num_classes"]) == (32, 8, 5)
    assert report["load_call"] == f"timm.create_model('local-dir:{timm_folder}', pretrained=True)"
    table = lg("inspect", timm_folder)
    assert table.code == 0 and f"timm.create_model('local-dir:{timm_folder}', pretrained=True)" in table.stdout.decode()


RESIZES = {
    "shrink-default": (["shrink", "--depth", "1", "--width", "32"], (1, 32, 2)),
    # Block ablation, then activation importance, the model between them a
    # stream: the output used to be one file (a stream drops config.json).
    "shrink-calibrated": (["shrink", "--depth", "1", "--width", "32", "--calibrate", "fashion-mnist-mini",
                           "--calibrate-samples", "4"], (1, 32, 2)),
    "grow-clone": (["grow", "--depth", "3", "--width", "128", "--method", "clone"], (3, 128, 8)),
    "grow-bot": (["grow", "--depth", "3", "--width", "96", "--method", "bot"], (3, 96, 6)),
}


@pytest.mark.parametrize("case", sorted(RESIZES))
def test_resized_folder_loads_strictly_with_timm(case, timm_folder, source_model, lg, tmp_path):
    args, (depth, width, heads) = RESIZES[case]
    command, *rest = args
    out = tmp_path / "out"
    result = lg(command, timm_folder, *rest, "-o", out)
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]  # and its card

    source_config = json.loads((timm_folder / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == source_config["architecture"] == "vit_tiny_patch16_224"
    args = config["model_args"]
    assert (args["depth"], args["embed_dim"], args["num_heads"]) == (depth, width, heads)
    assert int(width * args["mlp_ratio"]) == 4 * width  # the source's MLP ratio, kept
    assert config["num_features"] == width
    assert config["num_classes"] == config["pretrained_cfg"]["num_classes"] == 5
    for key in ("mean", "std", "input_size", "interpolation", "crop_pct"):
        assert config["pretrained_cfg"][key] == source_config["pretrained_cfg"][key]
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        metadata, keys = f.metadata(), set(f.keys())
    assert metadata["format"] == "pt" and metadata["lg.family"] == "vit" and metadata["lg.kind"] == "model"

    model = load_local_dir(out)
    assert set(model.state_dict()) == keys  # nothing missing, nothing unexpected
    assert (len(model.blocks), model.embed_dim, model.blocks[0].attn.num_heads) == (depth, width, heads)
    x = sample_input(source_model)
    with torch.no_grad():
        logits = model(x)
        assert logits.shape == (2, 5) and torch.isfinite(logits).all()
        if case == "grow-clone":  # function-preserving: the source's logits
            assert torch.allclose(logits, source_model(x), atol=1e-5)

    # lg reads its own output back as a timm folder, and says how to load it.
    report = json.loads(lg("inspect", out, "--json").stdout)
    assert (report["depth"], report["width"], report["heads"]) == (depth, width, heads)
    assert report["load_call"] == f"timm.create_model('local-dir:{out}', pretrained=True)"


@pytest.mark.parametrize("args", [["shrink", "--depth", "1", "--width", "32"],
                                  ["grow", "--depth", "3", "--width", "128", "--method", "bot"]])
def test_folder_and_single_file_resize_to_identical_tensors(args, timm_folder, source_model, lg, tmp_path):
    single = write_plain(source_model, tmp_path / "vit.safetensors")
    command, *rest = args
    assert lg(command, single, *rest, "--source-heads", str(HEADS), "-o", tmp_path / "one.safetensors").code == 0
    assert lg(command, timm_folder, *rest, "-o", tmp_path / "folder").code == 0
    from_file = load_file(str(tmp_path / "one.safetensors"))
    from_folder = load_file(str(tmp_path / "folder" / "model.safetensors"))
    assert from_file.keys() == from_folder.keys()
    for key, tensor in from_file.items():
        assert tensor.dtype == from_folder[key].dtype and torch.equal(tensor, from_folder[key]), key


def test_output_folder_is_replaced_only_with_force(timm_folder, lg, tmp_path):
    out = tmp_path / "out"
    assert lg("shrink", timm_folder, "--depth", "1", "-o", out).code == 0
    again = lg("shrink", timm_folder, "--width", "32", "-o", out)
    assert again.code == 1 and "exists; pass --force" in again.stderr
    assert lg("shrink", timm_folder, "--width", "32", "-o", out, "--force").code == 0
    assert json.loads((out / "config.json").read_text())["model_args"]["embed_dim"] == 32


def test_a_file_name_for_a_folder_output_is_refused(timm_folder, lg, tmp_path):
    result = lg("shrink", timm_folder, "--depth", "1", "-o", tmp_path / "small.safetensors")
    assert result.code == 1 and "written as a folder" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "small.safetensors").exists()


def edit_config(folder: Path, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("change, phrase", [
    # A timm folder of another family (its model_args are its own).
    (lambda c: c.update(architecture="resnet18", model_args={"num_classes": 5},
                        pretrained_cfg={**c["pretrained_cfg"], "fixed_input_size": False}),
     "'resnet18' is not a timm VisionTransformer"),
    (lambda c: c.update(architecture="no_such_model_x"), "'no_such_model_x' is not a timm model"),
    (lambda c: c["model_args"].update(depth=12), "config.json says depth 12, its tensors say 2"),
    # Without model_args, timm builds the architecture's own sizes (vit_tiny: 12 x 192).
    (lambda c: c.pop("model_args"), "config.json says depth 12, its tensors say 2"),
    (lambda c: c["model_args"].update(num_heads=3),
     "does not describe a model timm builds (dim should be divisible by num_heads)"),
    (lambda c: c.update(model_args=[1]), "model_args must be a JSON object"),
])
def test_a_config_that_does_not_describe_the_weights_is_refused(change, phrase, timm_folder, lg, tmp_path):
    edit_config(timm_folder, change)
    result = lg("inspect", timm_folder)
    assert result.code == 1 and phrase in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_a_pipe_carries_one_file_which_the_next_command_reads(timm_folder, source_model, lg, tmp_path):
    piped = lg("shrink", timm_folder, "--depth", "1", "-o", "-")
    assert piped.code == 0, piped.stderr
    out = tmp_path / "grown.safetensors"
    assert lg("grow", "-", "--depth", "2", "--method", "clone", "-o", out, stdin=piped.stdout).code == 0
    report = json.loads(lg("inspect", out, "--json").stdout)
    assert (report["depth"], report["width"], report["heads"], report["heads_assumed"]) == (2, 64, HEADS, False)


def test_a_learngene_of_a_folder_says_the_grow_line_lg_inspect_prints_and_it_runs(lg, tmp_path):
    """The learngene file keeps no hub config, so its descendants are single
    files: lg condense's last line is lg inspect's, with the file's suffix."""
    from printed import run_printed

    folder, gene = tmp_path / "ten_classes", tmp_path / "vit.tleg.lg.safetensors"
    save_for_hf(make_vit("cls-token", model_name="vit_tiny_patch16_224", num_heads=HEADS, num_classes=10),
                str(folder), safe_serialization=True)
    result = lg("condense", folder, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "1",
                "--batch-size", "8", "--subset", "16", "--test-subset", "8", "-o", gene)
    assert result.code == 0, result.stderr
    hint = json.loads(lg("inspect", gene, "--json").stdout)["expand_call"]
    assert f"build a model with: {hint}\n" in result.stderr
    assert " -o vit.tleg-depth" in hint and ".safetensors  # any depth" in hint
    ran = run_printed(hint, tmp_path)
    assert ran.code == 0, ran.stderr
