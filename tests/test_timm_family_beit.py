"""A timm family is a declaration (`lgcli.arch.timm_family.TimmFamily`) read
by one adapter: timm's BEiT (lgcli/arch/beit.py, a declaration of 80 lines
at most) is recognised from its state dict, inspected with a load line timm
runs strictly, and resized by select, bot and clone into models timm loads
strictly, clone keeping the logits (tests/test_timm_family.py: a test
family declared in a few lines)."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from safetensors.torch import save_file

import lgcli
from lgcli.arch import detect_family, get_adapter
from lgcli.errors import LgError
from lgcli.resize import resize_file

from conftest import printed_model

# A tiny BEiT: 4 x 4 patches of 8 pixels (a 4 x 4 window), head dim 16.
BEIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, num_classes=5)


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter off its initial value (norms off 1, biases off 0,
    position tables off 0), so that a tensor read into the wrong role shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    return model.eval()


def make_beit(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return perturbed(timm.create_model("beit_base_patch16_224", pretrained=False, **{**BEIT, **kwargs}))


def images(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32)  # float32: equal bits, not merely equal values


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A BEiT as timm saves it: its state dict alone, no lg metadata."""
    model = make_beit()
    path = tmp_path_factory.mktemp("beit") / "beit.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model, path


def test_a_beit_state_dict_is_recognised_and_read_back_bit_for_bit(plain):
    model, _ = plain
    state = model.state_dict()
    assert detect_family(state) == "beit"
    assert lgcli.arch.adapter_of_model(model).family == "beit"
    adapter = get_adapter("beit")
    spec, stack = adapter.to_stack(state)
    # The heads from the position tables (exact, not assumed), the window from their rows.
    assert (spec.depth, spec.width, spec.heads, spec.head_dim, spec.mlp_dim) == (3, 32, 2, 16, 128)
    assert not spec.heads_assumed
    table = state["blocks.1.attn.relative_position_bias_table"]
    assert table.shape == ((2 * 4 - 1) ** 2 + 3, 2)
    assert torch.equal(stack.layers["rel_pos_bias"].data[1], table)
    assert torch.equal(stack.layers["q_bias"].data[2], state["blocks.2.attn.q_bias"])
    assert torch.equal(stack.layers["v"].data[0], state["blocks.0.attn.qkv.weight"][64:])
    assert torch.equal(stack.layers["ls2"].data[0], state["blocks.0.gamma_2"])
    assert "k_bias" not in stack.layers  # BEiT's key bias is a zero buffer, not a weight
    back = adapter.from_stack(spec, stack)
    assert sorted(back) == sorted(state)
    for key, tensor in state.items():
        assert torch.equal(bits(back[key]), bits(tensor)), key
    assert adapter.parameter_count(spec) == sum(p.numel() for p in model.parameters())


def test_the_printed_line_loads_a_plain_file_strictly_with_the_same_logits(plain, lg):
    model, path = plain
    report = json.loads(lg("inspect", path, "--json").stdout)
    assert report["family"] == "beit" and report["img_size"] == 32 and report["num_classes"] == 5
    # One expression whose value is the model (timm's checkpoint_path loads strictly), as every family's.
    assert report["load_call"].startswith("timm.create_model('beit_base_patch16_224', pretrained=False, "
                                          f"checkpoint_path={str(path)!r}")
    assert report["load_imports"] == "import timm"
    namespace: dict = {}
    exec(report["load_imports"], namespace)
    loaded = eval(report["load_call"], namespace)
    with torch.no_grad():
        assert torch.equal(loaded(images()), model(images()))
    x = images()
    with torch.no_grad():
        assert torch.equal(printed_model(path)(x), model(x))


@pytest.mark.parametrize("method,direction,sizes", [
    ("select", "shrink", dict(depth=2, width=16)),
    ("bot", "shrink", dict(depth=2)),
    ("clone", "grow", dict(depth=3, width=64)),
    ("bot", "grow", dict(depth=5)),
])
def test_resized_beits_load_strictly_and_run(plain, tmp_path, method, direction, sizes):
    model, path = plain
    out = tmp_path / f"{method}.safetensors"
    resize_file(path, out, direction=direction, method=method, seed=0, **sizes)
    resized = printed_model(out)  # timm.create_model(...) + load_state_dict(strict=True)
    assert len(resized.blocks) == sizes["depth"]
    width = sizes.get("width", 32)
    assert resized.embed_dim == width and resized.blocks[0].attn.num_heads == width // 16
    assert resized.blocks[0].attn.relative_position_bias_table.shape == (52, width // 16)
    with torch.no_grad():
        logits = resized(images())
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()


@pytest.mark.parametrize("sizes", [dict(depth=3, width=64), dict(depth=5, width=64, insert="top")],
                         ids=["wider", "wider-and-deeper"])
def test_clone_keeps_the_logits(plain, tmp_path, sizes):
    model, path = plain
    out = tmp_path / "clone.safetensors"
    resize_file(path, out, direction="grow", method="clone", **sizes)
    grown = printed_model(out)
    assert len(grown.blocks) == sizes["depth"] and grown.embed_dim == 64
    x = images()
    with torch.no_grad():
        expected, found = model(x), grown(x)
    assert torch.allclose(found, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(found, torch.zeros_like(found), atol=1e-3)


def test_a_recorded_config_that_disagrees_is_refused(plain):
    model, _ = plain
    adapter = get_adapter("beit")
    config = adapter.config(adapter.to_stack(model.state_dict())[0])
    with pytest.raises(LgError, match="says depth 4, its tensors say 3"):
        adapter.to_stack(model.state_dict(), config={**config, "depth": 4})
    with pytest.raises(LgError, match="names model 'vit_base_patch16_224'"):
        adapter.to_stack(model.state_dict(), config={**config, "model_name": "vit_base_patch16_224"})
    # What the tensors show is checked; what they cannot show (layer scale's start) is the record's.
    with pytest.raises(LgError, match="says img_size 64, its tensors say 32"):
        adapter.to_stack(model.state_dict(), config={**config, "img_size": 64})
    spec, _ = adapter.to_stack(model.state_dict(), config={**config, "init_values": 1e-5})
    assert adapter.config(spec)["init_values"] == 1e-5


def test_a_sharded_output_has_a_load_line_that_runs(plain, tmp_path):
    model, path = plain
    folder = tmp_path / "shards"
    resize_file(path, folder, direction="grow", method="clone", depth=3, width=64, shard_size=100_000)
    assert len(list(folder.glob("*.safetensors"))) > 1
    report = lgcli.inspect_checkpoint(folder)
    assert report["load_imports"] == "import lgcli"
    x = images()
    with torch.no_grad():
        assert torch.allclose(printed_model(folder)(x), model(x), atol=1e-5, rtol=0)
