"""The timm ViT adapter: every variant round-trips exactly and loads strictly in timm."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
from lgcli.arch import get_adapter
from lgcli.checkpoint import read_checkpoint
from lgcli.stack import LAYER_ROLE_AXES

from conftest import VIT_VARIANTS, make_vit, sample_input, write_plain


def heads_of(model) -> int:
    return model.blocks[0].attn.num_heads


@pytest.mark.parametrize("variant", sorted(VIT_VARIANTS))
def test_variant_roundtrip_loads_strictly_in_timm(variant, tmp_path):
    model = make_vit(variant)
    x = sample_input(model)
    with torch.no_grad():
        expected = model(x)

    src = write_plain(model, tmp_path / "src.safetensors")
    loaded = lgcli.load(src, heads=heads_of(model))
    out = tmp_path / "out.safetensors"
    lgcli.save(out, loaded.spec, loaded.stack, method="copy", source=loaded)

    # The exact line `lg inspect` prints loads the file strictly.
    report = lgcli.inspect_checkpoint(out)
    reloaded = eval(report["load_call"].replace("'" + str(out) + "'", repr(str(out))), {"timm": timm})
    reloaded.eval()
    with torch.no_grad():
        got = reloaded(x)
    assert torch.equal(got, expected)

    # Every tensor is bit-identical, and nothing is added or lost.
    original = model.state_dict()
    written = read_checkpoint(out).tensors
    assert set(written) == set(original)
    for key, value in original.items():
        assert torch.equal(written[key], value), key
    # timm's own strict load of the state dict agrees.
    strict = timm.create_model(report["config"]["model_name"],
                               **{k: v for k, v in report["config"].items() if k != "model_name"})
    strict.load_state_dict(written, strict=True)


@pytest.mark.parametrize("variant", sorted(VIT_VARIANTS))
def test_inspect_json_figures(variant, tmp_path, lg):
    model = make_vit(variant)
    path = write_plain(model, tmp_path / "m.safetensors")
    result = lg("inspect", path, "--json", "--heads", heads_of(model))
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    state = model.state_dict()
    blocks = sum(v.numel() for k, v in state.items() if k.startswith("blocks."))
    head = sum(v.numel() for k, v in state.items() if k.startswith("head"))
    assert report["depth"] == len(model.blocks)
    assert report["width"] == model.embed_dim
    assert report["heads"] == heads_of(model) and report["heads_assumed"] is False
    assert report["head_dim"] == model.embed_dim // heads_of(model)
    assert report["mlp_dim"] == model.blocks[0].mlp.fc1.out_features
    assert report["patch_size"] == model.patch_embed.patch_size[0]
    assert report["img_size"] == model.patch_embed.img_size[0]
    assert report["in_chans"] == model.patch_embed.proj.in_channels
    assert report["num_classes"] == model.num_classes
    assert report["prefix_tokens"] == model.num_prefix_tokens
    assert report["parameters"]["total"] == sum(v.numel() for v in state.values())
    assert report["parameters"]["blocks"] == blocks
    assert report["parameters"]["head"] == head
    assert report["dtypes"] == {"float32": sum(v.numel() for v in state.values())}
    assert report["bytes"] == path.stat().st_size
    expected_pool = "token" if variant in ("cls-token", "register-tokens", "no-embed-class", "layer-scale",
                                           "no-qkv-bias", "qk-norm", "no-head", "pre-norm",
                                           "grayscale-3-heads", "distilled") else "avg"
    assert report["pooling"] == expected_pool


def test_inspect_through_a_pipe_matches_file(tmp_path):
    from conftest import run_lg

    model = make_vit("register-tokens")
    path = tmp_path / "m.safetensors"
    lgcli.save_model(model, path)
    by_file = run_lg("inspect", path, "--json")
    by_pipe = run_lg("inspect", "-", "--json", stdin=path.read_bytes())
    assert by_file.code == 0 and by_pipe.code == 0, by_pipe.stderr
    a, b = json.loads(by_file.stdout), json.loads(by_pipe.stdout)
    assert b["file"] == "-" and b["sha256"] == a["sha256"]
    for key in ("depth", "width", "heads", "parameters", "config", "pooling", "prefix_tokens"):
        assert a[key] == b[key]
    assert by_pipe.stderr == ""


def test_heads_from_metadata_then_flag_then_assumed(tmp_path, lg):
    model = make_vit("cls-token", embed_dim=128, num_heads=4)  # head dim 32, not the convention
    plain = write_plain(model, tmp_path / "plain.safetensors")
    assumed = json.loads(lg("inspect", plain, "--json").stdout)
    assert assumed["heads"] == 2 and assumed["heads_assumed"] is True  # d = 64 convention
    given = json.loads(lg("inspect", plain, "--json", "--heads", "4").stdout)
    assert given["heads"] == 4 and given["heads_assumed"] is False
    with_meta = tmp_path / "meta.safetensors"
    lgcli.save_model(model, with_meta)
    recorded = json.loads(lg("inspect", with_meta, "--json").stdout)
    assert recorded["heads"] == 4 and recorded["heads_assumed"] is False
    clash = lg("inspect", with_meta, "--heads", "2")
    assert clash.code != 0 and "says 4 heads; the 2 heads given contradict it" in clash.stderr
    # Named by value, not by a flag the command does not have (shrink's is --source-heads).
    clash = lg("shrink", with_meta, "--depth", "1", "--source-heads", "2", "-o", tmp_path / "x.safetensors")
    assert clash.code != 0 and "the 2 heads given contradict it" in clash.stderr and "--heads 2" not in clash.stderr


def test_qk_norm_gives_heads_exactly(tmp_path):
    model = make_vit("qk-norm")  # 4 heads of 16
    loaded = lgcli.load(write_plain(model, tmp_path / "m.safetensors"))
    assert (loaded.spec.heads, loaded.spec.head_dim, loaded.spec.heads_assumed) == (4, 16, False)


def test_stack_has_named_axes_and_splits_qkv_in_order(tmp_path):
    model = make_vit("cls-token")
    loaded = lgcli.load(write_plain(model, tmp_path / "m.safetensors"), heads=2)
    stack, spec = loaded.stack, loaded.spec
    qkv = model.blocks[1].attn.qkv.weight.detach()
    # timm orders fused qkv rows (q|k|v, head, head_dim): q is the first third.
    assert torch.equal(stack.layers["q"].data[1], qkv[:64])
    assert torch.equal(stack.layers["k"].data[1], qkv[64:128])
    assert torch.equal(stack.layers["v"].data[1], qkv[128:])
    for role, named in stack.layers.items():
        assert named.axes == LAYER_ROLE_AXES[role]
        assert named.data.shape[0] == spec.depth
    assert stack.globals["pos_embed"].axes == ("-", "tokens", "embed")
    assert stack.globals["head_weight"].axes == ("classes", "embed")
    stack.check(spec)


def test_random_stack_and_create_model_follow_spec(tmp_path):
    model = make_vit("layer-scale")
    loaded = lgcli.load(write_plain(model, tmp_path / "m.safetensors"), heads=2)
    adapter = get_adapter("vit")
    a, b = adapter.random_stack(loaded.spec, seed=3), adapter.random_stack(loaded.spec, seed=3)
    assert set(a.layers) == set(loaded.stack.layers)
    for role in a.layers:
        assert torch.equal(a.layers[role].data, b.layers[role].data)
        assert a.layers[role].shape == loaded.stack.layers[role].shape
    fresh = lgcli.create_model(loaded.spec, seed=0)
    fresh.load_state_dict(adapter.from_stack(loaded.spec, loaded.stack), strict=True)


@pytest.mark.parametrize("variant", sorted(VIT_VARIANTS))
def test_shapes_and_parameter_count_from_sizes_alone_are_timms(variant):
    """`model_shapes` (the one count of every timm family: used to size a
    request before allocating, and to refuse writing what timm would not
    load) is timm's own state dict, key by key, for the model read and for
    one of other sizes (the shapes read, each resizable axis resized)."""
    from lgcli.arch import get_adapter

    model = make_vit(variant)
    spec, _ = lgcli.spec_of_model(model)
    adapter = get_adapter("vit")
    expected = adapter.model_shapes(spec).state()
    assert expected == {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert adapter.parameter_count(spec) == sum(v.numel() for v in model.state_dict().values())
    resized = spec.with_sizes(depth=spec.depth + 1, width=2 * spec.width, heads=2 * spec.heads,
                              head_dim=spec.head_dim, mlp_dim=3 * spec.mlp_dim)
    with torch.device("meta"):
        other = adapter.create_model(resized)
    assert adapter.model_shapes(resized).state() == {k: tuple(v.shape) for k, v in other.state_dict().items()}
    assert adapter.parameter_count(resized) == sum(p.numel() for p in other.parameters())


def test_a_state_timm_would_not_load_is_not_written(tmp_path):
    model = make_vit("cls-token")
    spec, stack = lgcli.spec_of_model(model)
    import dataclasses

    # Same tensors, but a spec of a model without qkv bias (its timm
    # arguments and the block shapes it was read from say so).
    from lgcli.arch.timm_family import ARGS, SHAPES

    shapes = spec.extras[SHAPES]
    layer = {k: v for k, v in shapes["layer"].items() if k != "attn.qkv.bias"}
    wrong = dataclasses.replace(spec, extras={**spec.extras, ARGS: {**spec.extras[ARGS], "qkv_bias": False},
                                              SHAPES: {**shapes, "layer": layer}})
    with pytest.raises(lgcli.LgError, match="unexpected tensor blocks.0.attn.qkv.bias"):
        lgcli.save(tmp_path / "x.safetensors", wrong, stack)
    assert not any(tmp_path.iterdir())
