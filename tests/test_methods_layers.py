"""Heur-LG / Auto-LG (WAVE appendix Eqs. A.3 / A.4): inherited layers in place,
the rest timm's seeded random initialisation."""

from __future__ import annotations

import pytest
import torch

import lgcli
from lgcli.arch import get_adapter
from lgcli.methods.common import uniform_indices
from lgcli.resize import resize

from conftest import make_vit


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = tmp_path_factory.mktemp("layers") / "src.safetensors"
    lgcli.save_model(make_vit(depth=4, embed_dim=64, num_heads=2), path)
    return lgcli.load(path)


@pytest.mark.parametrize("method, inherited, random_layers", [
    ("heur-lg", {2: 0, 3: 1, 4: 2, 5: 3}, [0, 1]),   # source on top, random below
    ("auto-lg", {0: 0, 1: 1, 2: 2, 3: 3}, [4, 5]),   # source at the bottom, random above
])
def test_grow_in_depth(loaded, method, inherited, random_layers):
    spec, out, report = resize(loaded, direction="grow", method=method, depth=6, seed=3)
    assert report["details"]["random_layers"] == random_layers
    random = get_adapter("vit").random_stack(spec, seed=3)
    for role, named in out.layers.items():
        for target, source in inherited.items():
            assert torch.equal(named.data[target], loaded.stack.layers[role].data[source]), role
        for target in random_layers:
            assert torch.equal(named.data[target], random.layers[role].data[target]), role
    assert torch.equal(out.globals["head_weight"].data, loaded.stack.globals["head_weight"].data)


@pytest.mark.parametrize("method, kept", [("heur-lg", [2, 3]), ("auto-lg", [0, 1])])
def test_shrink_in_depth_keeps_the_last_or_first_layers(loaded, method, kept):
    _, out, _ = resize(loaded, direction="shrink", method=method, depth=2)
    for role, named in out.layers.items():
        assert torch.equal(named.data, loaded.stack.layers[role].data[kept]), role


def test_width_growth_writes_the_source_at_the_selection_indices(loaded):
    _, out, _ = resize(loaded, direction="grow", method="heur-lg", width=96, seed=0)
    embed = uniform_indices(96, 64)
    q = out.layers["q"].data[:, embed][:, :, embed]
    assert torch.equal(q, loaded.stack.layers["q"].data)
    # ... and weight selection takes exactly those elements back out.
    _, back, _ = resize(lgcli.Loaded(*resize(loaded, direction="grow", method="heur-lg", width=96,
                                               seed=0)[:2], loaded.checkpoint),
                        direction="shrink", method="select", width=64)
    for role, named in loaded.stack.items():
        other = back.layers.get(role) or back.globals[role]
        assert torch.equal(other.data, named.data), role


def test_seed_makes_random_layers_reproducible(loaded):
    a = resize(loaded, direction="grow", method="auto-lg", depth=5, seed=1)[1]
    b = resize(loaded, direction="grow", method="auto-lg", depth=5, seed=1)[1]
    c = resize(loaded, direction="grow", method="auto-lg", depth=5, seed=2)[1]
    assert torch.equal(a.layers["fc1"].data, b.layers["fc1"].data)
    assert not torch.equal(a.layers["fc1"].data[4], c.layers["fc1"].data[4])
