"""The data-aware resize methods on a Swin (issue 28 item 1): one forward
pass measures every stage's blocks, and block influence, angular distance
and activation importance each choose within each stage, on timm's Swin and
transformers' alike."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import lgcli
from conftest import printed_model
from hf_image_models import load_strict, weights
from lgcli.resize import resize_file
from test_hf_swin import TINY, hf_names
from test_swin import images, make_swin

IMAGES = "fashion-mnist-mini"
CALIBRATION = dict(calibrate=IMAGES, calibrate_samples=8)
# A Swin block adds its attention's and its MLP's outputs to the residual;
# with both output projections zero it is an exact identity (timm's Swin has
# no layer scale).
OUTPUTS = ("attn.proj.weight", "attn.proj.bias", "mlp.fc2.weight", "mlp.fc2.bias")


def with_identities(model: torch.nn.Module, blocks: list[tuple[int, int]]) -> torch.nn.Module:
    """`model` with each (stage, block) of `blocks` made an exact identity."""
    with torch.no_grad():
        for stage, block in blocks:
            for name, param in model.layers[stage].blocks[block].named_parameters():
                if name in OUTPUTS:
                    param.zero_()
    return model


def saved(model: torch.nn.Module, path):
    lgcli.save_model(model, path)
    return path


def chosen_of(path) -> dict:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    options = (json.loads(meta["lg.provenance"])[0]["options"] if "lg.provenance" in meta
               else json.loads(meta["lg.options"]))
    return options["chosen"]


def test_block_influence_drops_each_stages_identity_block(tmp_path):
    model = with_identities(make_swin(), [(0, 1), (1, 0)])
    source, out = saved(model, tmp_path / "swin.safetensors"), tmp_path / "bi.safetensors"
    report = resize_file(source, out, direction="shrink", method="block-influence", depth=(1, 1), **CALIBRATION)
    stages = report["details"]["stages"]
    for stage, identity in ((0, 1), (1, 0)):
        influence = stages[stage]["block_influence"]
        assert influence[identity] == pytest.approx(0, abs=1e-6) and influence[1 - identity] > 1e-4
    assert [s["kept_layers"] for s in stages] == [[0], [1]]
    assert chosen_of(out) == {"stages": [{"kept_layers": [0], "dropped_layers": [1]},
                                         {"kept_layers": [1], "dropped_layers": [0]}]}
    written, original = load_file(str(out)), model.state_dict()
    for (stage, kept) in ((0, 0), (1, 1)):
        for suffix in ("attn.qkv.weight", "mlp.fc1.weight", "norm2.bias", "attn.relative_position_bias_table"):
            assert torch.equal(written[f"layers.{stage}.blocks.0.{suffix}"],
                               original[f"layers.{stage}.blocks.{kept}.{suffix}"])
    with torch.no_grad():
        assert printed_model(out)(images(model)).isfinite().all()  # timm loads it strictly and it runs


def test_block_influence_that_drops_a_last_identity_block_keeps_the_logits(tmp_path):
    """A stage's last block an identity and dropped: the kept blocks keep
    their places (a Swin's odd blocks shift their windows), so the same logits."""
    model = with_identities(make_swin(), [(0, 1), (1, 1)])
    out = tmp_path / "bi.safetensors"
    resize_file(saved(model, tmp_path / "swin.safetensors"), out, direction="shrink", method="block-influence",
                depth=(1, 1), **CALIBRATION)
    x = images(model)
    with torch.no_grad():
        torch.testing.assert_close(printed_model(out)(x), model(x), atol=1e-5, rtol=0)


def test_angular_drops_the_contiguous_identity_blocks_of_a_stage(tmp_path):
    model = with_identities(make_swin(depths=(4, 2)), [(0, 1), (0, 2)])
    out = tmp_path / "ang.safetensors"
    report = resize_file(saved(model, tmp_path / "swin.safetensors"), out, direction="shrink", method="angular",
                         depth=(2, 1), **CALIBRATION)
    first, second = report["details"]["stages"]
    assert first["angular_distance"][1] == pytest.approx(0, abs=1e-3)  # d(1, 2): blocks 1-2 change nothing
    assert min(first["angular_distance"][0], first["angular_distance"][2]) > 1e-3
    assert first["kept_layers"] == [0, 3] and first["dropped_layers"] == [1, 2]
    assert len(second["angular_distance"]) == 2 and len(second["kept_layers"]) == 1
    with torch.no_grad():
        assert printed_model(out)(images(model)).isfinite().all()


def test_activation_drops_the_neurons_that_never_activate_and_merges_consistently(tmp_path):
    """Half the MLP neurons of one block per stage dead (fc1 row and bias
    zero: GELU(0) = 0 on every patch): halving the width keeps exactly the
    live half there. Two of stage 1's four heads in block 0 silent (their
    values zero): the other two are kept, with their position tables. The
    patch merging before stage 1 keeps, on its input, the channels stage 0
    kept, neighbour by neighbour."""
    model = make_swin()
    dead = {(0, 1): torch.arange(0, 64, 2), (1, 0): torch.arange(1, 128, 2)}
    with torch.no_grad():
        for (stage, block), rows in dead.items():
            fc1 = model.layers[stage].blocks[block].mlp.fc1
            fc1.weight[rows] = 0
            fc1.bias[rows] = 0
        qkv = model.layers[1].blocks[0].attn.qkv  # rows: q, k, v of 32 each; head h's v rows 64 + 8h ..
        for head in (0, 2):
            qkv.weight[64 + 8 * head:72 + 8 * head] = 0
            qkv.bias[64 + 8 * head:72 + 8 * head] = 0
    out = tmp_path / "act.safetensors"
    report = resize_file(saved(model, tmp_path / "swin.safetensors"), out, direction="shrink", method="activation",
                         width=8, **CALIBRATION)
    stages = report["details"]["stages"]
    assert stages[0]["kept_mlp"][1] == list(range(1, 64, 2))
    assert stages[1]["kept_mlp"][0] == list(range(0, 128, 2))
    assert stages[1]["kept_heads"][0] == [1, 3]
    written, original = load_file(str(out)), model.state_dict()
    embed = [torch.tensor(s["kept_embed"]) for s in stages]
    assert [len(e) for e in embed] == [8, 16]
    fc1 = original["layers.1.blocks.0.mlp.fc1.weight"]
    assert torch.equal(written["layers.1.blocks.0.mlp.fc1.weight"], fc1[0::2][:, embed[1]])
    reduction = original["layers.1.downsample.reduction.weight"].reshape(32, 4, 16)
    assert torch.equal(written["layers.1.downsample.reduction.weight"],
                       reduction[embed[1]][:, :, embed[0]].reshape(16, 32))
    norm = original["layers.1.downsample.norm.weight"].reshape(4, 16)
    assert torch.equal(written["layers.1.downsample.norm.weight"], norm[:, embed[0]].reshape(32))
    assert torch.equal(written["patch_embed.proj.weight"], original["patch_embed.proj.weight"][embed[0]])
    assert torch.equal(written["head.fc.weight"], original["head.fc.weight"][:, embed[1]])
    table = "layers.1.blocks.0.attn.relative_position_bias_table"
    assert torch.equal(written[table], original[table][:, [1, 3]])
    with torch.no_grad():
        assert printed_model(out)(images(model)).isfinite().all()


@pytest.mark.parametrize("method, sizes", [("block-influence", dict(depth=(1, 1))),
                                           ("activation", dict(width=8, depth=(1, 2)))])
def test_the_same_data_and_seed_give_the_same_bytes(tmp_path, method, sizes):
    source = saved(make_swin(), tmp_path / "swin.safetensors")
    outs = [tmp_path / f"{i}.safetensors" for i in range(2)]
    for out in outs:
        resize_file(source, out, direction="shrink", method=method, seed=4, **sizes, **CALIBRATION)
    assert outs[0].read_bytes() == outs[1].read_bytes()


@pytest.mark.parametrize("method, sizes", [("block-influence", dict(depth=(1, 1))),
                                           ("angular", dict(depth=(1, 1))),
                                           ("activation", dict(width=8))])
def test_transformers_swin_chooses_as_timm_and_loads_strictly(tmp_path, method, sizes):
    """One Swin (block 1 of each stage an identity) as a timm file and as a
    transformers folder: the calibration pass hooks each form's own modules,
    both choose the same and write the same weights; the folder loads with
    nothing missing, unexpected or mismatched, and runs."""
    model = with_identities(make_swin(), [(0, 1), (1, 1)])
    timm_file = saved(model, tmp_path / "swin.safetensors")
    folder = tmp_path / "src"
    folder.mkdir()
    transformers.SwinConfig(**TINY, architectures=["SwinForImageClassification"]).save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in hf_names(model.state_dict()).items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    timm_report = resize_file(timm_file, tmp_path / "timm.safetensors", direction="shrink", method=method,
                              **sizes, **CALIBRATION)
    hf_report = resize_file(folder, tmp_path / "hf", direction="shrink", method=method, **sizes, **CALIBRATION)
    chosen = [{k: v for k, v in stage.items() if k.startswith("kept_")} for stage in hf_report["details"]["stages"]]
    if method != "activation":  # the identity block of each stage is the one dropped
        assert [stage["kept_layers"] for stage in chosen] == [[0], [0]]
    assert chosen == [{k: v for k, v in stage.items() if k.startswith("kept_")}
                      for stage in timm_report["details"]["stages"]]
    from_timm, from_hf = hf_names(load_file(str(tmp_path / "timm.safetensors"))), weights(tmp_path / "hf")
    assert sorted(from_timm) == sorted(from_hf)
    for key, tensor in from_hf.items():
        torch.testing.assert_close(tensor, from_timm[key], atol=0, rtol=0, msg=key)
    resized = load_strict(tmp_path / "hf", "SwinForImageClassification")
    with torch.no_grad():
        assert resized(pixel_values=images(make_swin())).logits.isfinite().all()


def test_cli_shrinks_a_swin_with_block_influence(tmp_path, lg):
    source = saved(with_identities(make_swin(), [(0, 1), (1, 1)]), tmp_path / "swin.safetensors")
    out = tmp_path / "bi.safetensors"
    result = lg("shrink", source, "--depth", "1,1", "--method", "block-influence", "--calibrate", IMAGES,
                "--calibrate-samples", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    assert [s["dropped_layers"] for s in json.loads(result.stdout)["details"]["stages"]] == [[1], [1]]
    # lg inspect's one line says what each stage kept.
    shown = lg("inspect", out)
    assert shown.code == 0, shown.stderr
    assert "stage 1: layers [0] | stage 2: layers [0]" in " ".join(shown.stdout.decode().split())


def test_block_ablations_progress_names_each_stage(tmp_path, lg):
    """Each stage chooses its own blocks: its rounds said without the stage
    read as one run's ("round 1 of 1 ... round 1 of 1")."""
    source = saved(with_identities(make_swin(), [(0, 1), (1, 1)]), tmp_path / "swin.safetensors")
    result = lg("shrink", source, "--depth", "1,1", "--method", "block-ablation", "--calibrate", IMAGES,
                "--calibrate-samples", "8", "-o", tmp_path / "ba.safetensors")
    assert result.code == 0, result.stderr
    rounds = [line for line in result.stderr.splitlines() if "block-ablation: round" in line]
    assert [line.split(" (")[0] for line in rounds] == [f"stage {stage}: block-ablation: round 1 of 1: block 1 removed"
                                                        for stage in (1, 2)]
