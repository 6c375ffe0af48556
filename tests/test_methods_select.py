"""Weight selection (SPEC.md "Baselines"): the index formula on hand-checked
cases, and a selected model sliced entry by entry."""

from __future__ import annotations

import pytest
import torch

import lgcli
from lgcli.methods.common import uniform_indices
from lgcli.resize import resize

from conftest import make_vit


@pytest.mark.parametrize("source, target, expected", [
    (8, 4, [0, 2, 4, 6]),          # divisible: arange(s) * (T // s)
    (12, 3, [0, 4, 8]),
    (6, 6, [0, 1, 2, 3, 4, 5]),
    (6, 4, [0, 2, 3, 5]),          # round(linspace(0, 5, 4)) = round(0, 1.67, 3.33, 5)
    (10, 4, [0, 3, 6, 9]),         # linspace(0, 9, 4) is whole
    (6, 5, [0, 1, 2, 4, 5]),       # 2.5 rounds to even: 2
    (7, 2, [0, 6]),
    (5, 3, [0, 2, 4]),
])
def test_uniform_indices(source, target, expected):
    assert uniform_indices(source, target).tolist() == expected


def test_select_slices_every_tensor_with_the_same_indices(tmp_path):
    path = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit(depth=4, embed_dim=96, num_heads=3), path)   # head dim 32, MLP 384
    loaded = lgcli.load(path)
    spec, small, _ = resize(loaded, direction="shrink", method="select", depth=3, width=64)
    assert (spec.heads, spec.head_dim, spec.mlp_dim) == (2, 32, 256)
    embed, mlp = uniform_indices(96, 64), uniform_indices(384, 256)
    assert embed[:5].tolist() == [0, 2, 3, 5, 6] and embed[-1] == 95   # round(k * 95 / 63)
    src = loaded.stack
    for role in ("q", "k", "v"):   # rows: attn (96 -> 64), columns: embed; first 3 layers
        assert torch.equal(small.layers[role].data, src.layers[role].data[:3][:, embed][:, :, embed])
        assert torch.equal(small.layers[role + "_bias"].data, src.layers[role + "_bias"].data[:3][:, embed])
    assert torch.equal(small.layers["o"].data, src.layers["o"].data[:3][:, embed][:, :, embed])
    assert torch.equal(small.layers["fc1"].data, src.layers["fc1"].data[:3][:, mlp][:, :, embed])
    assert torch.equal(small.layers["fc2"].data, src.layers["fc2"].data[:3][:, embed][:, :, mlp])
    assert torch.equal(small.layers["norm2_weight"].data, src.layers["norm2_weight"].data[:3][:, embed])
    assert torch.equal(small.globals["pos_embed"].data, src.globals["pos_embed"].data[..., embed])
    assert torch.equal(small.globals["head_weight"].data, src.globals["head_weight"].data[:, embed])
    assert torch.equal(small.globals["patch_embed_weight"].data, src.globals["patch_embed_weight"].data[embed])


@pytest.mark.parametrize("shape,dim", [((5, 7), 1), ((5, 7), 0), ((3, 4, 9), 2), ((3, 4, 9), -1), ((3, 4, 9), 1),
                                       ((2, 3, 4, 9), 3), ((2, 3, 4, 9), 0)])
def test_index_along_equals_index_select(shape, dim):
    """The flattened gather lg uses for the last axis of a layer stack gives
    index_select's values, shape and dtype exactly, for any indices
    (repeated, unordered) and for views that are not contiguous."""
    from lgcli.stack import index_along

    generator = torch.Generator().manual_seed(0)
    tensor = torch.randn(*shape, generator=generator, dtype=torch.float64)
    size = shape[dim]
    for index in (torch.tensor([size - 1, 0, 0, size // 2]), torch.arange(size), torch.tensor([1])):
        for view in (tensor, tensor.transpose(0, -1).contiguous().transpose(0, -1)):
            expected = view.index_select(dim, index)
            got = index_along(view, dim, index)
            assert got.shape == expected.shape and got.dtype == expected.dtype
            assert torch.equal(got, expected)
