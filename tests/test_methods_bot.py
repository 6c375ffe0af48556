"""BoT (SPEC.md "BoT"): exact round trips, the 3-D DWT approximation band,
head-aware transforms and the rescale options."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pywt
import torch

import lgcli
from lgcli.resize import resize, resize_file

from conftest import make_vit

ROUND_TRIPS = {"depth x2": dict(depth=8), "width x2": dict(width=128), "both x2": dict(depth=8, width=128)}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("bot") / "src.safetensors"
    lgcli.save_model(make_vit(depth=4, embed_dim=64, num_heads=2), path)  # head dim 32
    return path


@pytest.mark.parametrize("qkv_axis", ["flat", "heads"])
@pytest.mark.parametrize("sizes", list(ROUND_TRIPS.values()), ids=list(ROUND_TRIPS))
@pytest.mark.parametrize("rescale", ["none", "mean"])
def test_shrink_of_grow_is_the_identity(source, sizes, qkv_axis, rescale, tmp_path):
    options = dict(method="bot", wavelet="haar", rescale=rescale, qkv_axis=qkv_axis)
    grown = tmp_path / "grown.safetensors"
    resize_file(source, grown, direction="grow", **sizes, **options)
    _, back, _ = resize(grown, direction="shrink", depth=4, width=64, **options)
    original = lgcli.load(source).stack
    for role, named in original.items():
        other = back.layers.get(role) or back.globals[role]
        assert other.shape == named.shape, role
        assert (other.data - named.data).abs().max() <= 1e-6, role


def test_round_trip_through_the_cli(source, tmp_path, lg):
    grown, back = tmp_path / "g.safetensors", tmp_path / "b.safetensors"
    flags = ["--method", "bot", "--wavelet", "haar", "--rescale", "none"]
    assert lg("grow", source, "--depth", "8", "--width", "128", *flags, "-o", grown).code == 0
    assert lg("shrink", grown, "--depth", "4", "--width", "64", *flags, "-o", back).code == 0
    a, b = lgcli.load(source).checkpoint.tensors, lgcli.load(back).checkpoint.tensors
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


@pytest.mark.parametrize("name", ["haar", "db2", "sym4"])
def test_shrink_is_the_3d_approximation_band(source, name):
    """Depth and width halved: every (layer, out, in) stack becomes pywt's
    'aaa' subband; every per-layer vector the 2-D 'aa' band; globals the 1-D
    band along embed only."""
    loaded = lgcli.load(source)
    _, small, _ = resize(loaded, direction="shrink", method="bot", depth=2, width=32, wavelet=name, rescale="none",
                         qkv_axis="flat")
    for role in ("q", "o", "fc1", "fc2"):
        reference = pywt.dwtn(loaded.stack.layers[role].data.numpy(), name, mode="periodization")["aaa"]
        np.testing.assert_allclose(small.layers[role].data.numpy(), reference, atol=1e-5)
    reference = pywt.dwtn(loaded.stack.layers["norm1_weight"].data.numpy(), name, mode="periodization")["aa"]
    np.testing.assert_allclose(small.layers["norm1_weight"].data.numpy(), reference, atol=1e-5)
    head = loaded.stack.globals["head_weight"].data.numpy()            # (classes, embed)
    np.testing.assert_allclose(small.globals["head_weight"].data.numpy(),
                               pywt.dwt(head, name, mode="periodization", axis=1)[0], atol=1e-5)


def test_head_aware_shrink_combines_whole_heads(tmp_path):
    """--qkv-axis heads: 4 heads -> 2, head dim kept; with haar and no
    rescaling new head h is (head 2h + head 2h+1) / sqrt(2), element by element."""
    path = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit(depth=2, embed_dim=128, num_heads=4), path)  # head dim 32
    loaded = lgcli.load(path)
    spec, small, _ = resize(loaded, direction="shrink", method="bot", heads=2, width=64, qkv_axis="heads",
                            wavelet="haar", rescale="none")
    assert (spec.heads, spec.head_dim) == (2, 32)
    q = loaded.stack.layers["q"].data.unflatten(1, (4, 32))             # (layer, head, d, embed)
    pairs = (q[:, 0::2] + q[:, 1::2]) / math.sqrt(2)
    embed_band = (pairs[..., 0::2] + pairs[..., 1::2]) / math.sqrt(2)   # embed 128 -> 64
    assert torch.allclose(small.layers["q"].data, embed_band.flatten(1, 2), atol=1e-6)


def test_std_rescale_keeps_each_tensors_mean_and_std(source):
    loaded = lgcli.load(source)
    _, big, _ = resize(loaded, direction="grow", method="bot", depth=6, width=96, rescale="std")
    for role, named in loaded.stack.items():
        grown = big.layers.get(role) or big.globals[role]
        std, mean = torch.std_mean(named.data, correction=0)
        new_std, new_mean = torch.std_mean(grown.data, correction=0)
        assert torch.allclose(new_mean, mean, atol=1e-5) and torch.allclose(new_std, std, rtol=1e-4), role


def test_haar_grow_with_std_rescale_repeats_layers(source):
    """Haar synthesis with zero details duplicates each sample; matching the
    moments makes that an exact copy: layer 2l and 2l+1 equal source layer l."""
    loaded = lgcli.load(source)
    _, big, _ = resize(loaded, direction="grow", method="bot", depth=8, rescale="std")
    for role in ("q", "fc1", "norm1_weight"):
        src, out = loaded.stack.layers[role].data, big.layers[role].data
        assert torch.allclose(out[0::2], src, atol=1e-5) and torch.allclose(out[1::2], src, atol=1e-5)


def test_crop_keeps_the_first_layers(source):
    loaded = lgcli.load(source)
    _, out, report = resize(loaded, direction="shrink", method="bot", depth=3, fit="crop", rescale="none")
    assert report["details"]["axes"]["layer"] == {"from": 4, "to": 3, "levels": 0, "fit": "crop 4->3"}
    assert torch.equal(out.layers["fc1"].data, loaded.stack.layers["fc1"].data[:3])


@pytest.mark.parametrize("rescale", ["none", "mean"])
@pytest.mark.parametrize("qkv_axis", ["heads", "flat"])
@pytest.mark.parametrize("size", [(8, 64), (4, 128), (16, 256), (8, 256)])
def test_haar_growth_in_one_pass_equals_level_after_level(tmp_path, monkeypatch, rescale, qkv_axis, size):
    """The one-pass haar growth (a broadcast copy of the source multiplied by
    rec_lo once per level) gives exactly, bit for bit, the level-by-level
    zero-detail IDWT of the general path."""
    from lgcli.methods import bot as bot_module

    path = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit("qk-norm", depth=4, embed_dim=64, num_heads=4), path)
    loaded = lgcli.load(path)
    depth, width = size
    fast = resize(loaded, direction="grow", method="bot", depth=depth, width=width, rescale=rescale,
                  qkv_axis=qkv_axis)[1].materialized()
    monkeypatch.setattr(bot_module, "_haar_growth", lambda *args, **kwargs: None)
    general = resize(loaded, direction="grow", method="bot", depth=depth, width=width, rescale=rescale,
                     qkv_axis=qkv_axis)[1].materialized()
    for role, named in general.items():
        assert torch.equal(fast.layers.get(role, fast.globals.get(role)).data, named.data), role
