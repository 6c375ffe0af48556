"""tleg-fit (SPEC.md "TLEG"): exact on stacks that are linear in depth, with
its residual reported."""

from __future__ import annotations

import pytest
import torch

import lgcli
from lgcli.errors import LgError
from lgcli.methods.tleg_fit import fit_line
from lgcli.resize import resize

from conftest import make_vit


def linear_in_depth(loaded, seed=0):
    """The loaded stack with every per-layer tensor replaced by B + ((l-1)/L) A (TLEG Eq. 1)."""
    gen = torch.Generator().manual_seed(seed)
    depth = loaded.spec.depth
    lines = {}
    loaded.stack = loaded.stack.materialized()  # held in memory, so that it can be edited
    for role, named in loaded.stack.layers.items():
        a = torch.randn(named.shape[1:], generator=gen)
        b = torch.randn(named.shape[1:], generator=gen)
        lines[role] = (a, b)
        x = (torch.arange(depth, dtype=torch.float32) / depth).view(-1, *([1] * a.dim()))
        named.data = b + x * a
    return lines


@pytest.fixture
def loaded(tmp_path):
    path = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit(depth=4, embed_dim=64, num_heads=2), path)
    return lgcli.load(path)


@pytest.mark.parametrize("new_depth", [2, 7, 12])
def test_fit_is_exact_on_a_linear_stack(loaded, new_depth):
    lines = linear_in_depth(loaded)
    direction = "grow" if new_depth > 4 else "shrink"
    _, out, report = resize(loaded, direction=direction, method="tleg-fit", depth=new_depth)
    assert report["details"]["relative_residual"] is None  # nothing is fitted until the stack is made
    out = out.materialized()
    assert report["details"]["relative_residual"] < 1e-6
    assert all(r["relative_residual"] < 1e-6 for r in report["details"]["roles"].values())
    for role, (a, b) in lines.items():
        for l in range(1, new_depth + 1):   # theta_l = B + ((l - 1) / L') A at the new depth
            expected = b + ((l - 1) / new_depth) * a
            assert torch.allclose(out.layers[role].data[l - 1], expected, atol=1e-5), (role, l)
    assert out.globals["pos_embed"].data is loaded.stack.globals["pos_embed"].data


def test_fit_line_recovers_slope_and_base():
    a, b = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5, 3.0]])
    x = torch.arange(5.0).view(-1, 1, 1) / 5
    slope, base, residual = fit_line(b + x * a)
    assert torch.allclose(slope, a, atol=1e-6) and torch.allclose(base, b, atol=1e-6)
    assert residual.abs().max() < 1e-6


def test_residual_is_reported_on_a_non_linear_stack(loaded):
    # Every element is 0, 1, 0, 1 over x = 0, 1/4, 1/2, 3/4. By hand: slope 0.8,
    # base 0.2, fit 0.2, 0.4, 0.6, 0.8, residual -0.2, 0.6, -0.6, 0.2, so
    # ||r||^2 / ||theta||^2 = 0.8 / 2 and R^2 = 1 - 0.8 / 1.
    loaded.stack = loaded.stack.materialized()
    for named in loaded.stack.layers.values():
        pattern = torch.tensor([0.0, 1.0, 0.0, 1.0]).view(-1, *([1] * (named.data.dim() - 1)))
        named.data = pattern.expand_as(named.data).clone()
    _, out, report = resize(loaded, direction="grow", method="tleg-fit", depth=8)
    out = out.materialized()
    assert report["details"]["relative_residual"] == pytest.approx(0.4 ** 0.5, rel=1e-5)
    assert report["details"]["roles"]["q"]["r2"] == pytest.approx(0.2, abs=1e-5)
    expected = 0.2 + torch.arange(8.0) / 8 * 0.8
    assert torch.allclose(out.layers["fc1"].data[:, 0, 0], expected, atol=1e-6)


def test_tleg_fit_refuses_a_width_change(loaded):
    with pytest.raises(LgError, match="depth only"):
        resize(loaded, direction="grow", method="tleg-fit", width=128)
