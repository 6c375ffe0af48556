"""The torch wavelet transforms equal pywavelets' (the reference) for every
discrete wavelet, and the level planning hits exact target sizes."""

from __future__ import annotations

import numpy as np
import pytest
import pywt
import torch

from lgcli.errors import LgError
from lgcli.methods import wavelets

SIZES = (1, 2, 3, 5, 8, 13)  # odd, even, and shorter than most filters


@pytest.mark.parametrize("name", pywt.wavelist(kind="discrete"))
def test_one_level_equals_pywt_periodization(name):
    rng = np.random.default_rng(0)
    for n in SIZES:
        x = rng.standard_normal((2, n, 3))
        approx = wavelets.dwt_approx(torch.from_numpy(x), 1, name).numpy()
        np.testing.assert_allclose(approx, pywt.dwt(x, name, mode="periodization", axis=1)[0],
                                   atol=1e-12, err_msg=f"dwt n={n}")
        synth = wavelets.idwt_approx(torch.from_numpy(x), 1, name).numpy()
        np.testing.assert_allclose(synth, pywt.idwt(x, None, name, mode="periodization", axis=1),
                                   atol=1e-12, err_msg=f"idwt n={n}")


@pytest.mark.parametrize("name", ["haar", "db2", "bior6.8", "coif3"])
def test_axis_by_axis_equals_the_3d_transform(name):
    """BoT's 3-D approximation band (and its zero-detail inverse) is the 1-D
    transform applied along each axis in turn."""
    x = np.random.default_rng(1).standard_normal((4, 6, 10)).astype(np.float32)
    t = torch.from_numpy(x)
    for axis in range(3):
        t = wavelets.dwt_approx(t, axis, name)
    reference = pywt.dwtn(x, name, mode="periodization")["aaa"]
    np.testing.assert_allclose(t.numpy(), reference, atol=1e-5)

    small = reference
    grown = torch.from_numpy(small)
    for axis in range(3):
        grown = wavelets.idwt_approx(grown, axis, name)
    coeffs = {key: np.zeros_like(small) for key in ("aad", "ada", "add", "daa", "dad", "dda", "ddd")}
    coeffs["aaa"] = small
    np.testing.assert_allclose(grown.numpy(), pywt.idwtn(coeffs, name, mode="periodization"), atol=1e-5)


@pytest.mark.parametrize("source, target, fit, levels", [
    (8, 4, "interp", 1), (8, 2, "interp", 2), (12, 9, "interp", 0), (1024, 96, "interp", 3),
    (4, 8, "interp", 1), (4, 6, "interp", 0), (96, 1024, "interp", 3), (96, 1024, "crop", 4),
    (4, 6, "crop", 1), (7, 4, "crop", 1), (7, 1, "interp", 3),
])
def test_plan_levels(source, target, fit, levels):
    assert wavelets.plan_levels(source, target, fit) == levels


@pytest.mark.parametrize("source, target", [(12, 9), (4, 6), (96, 1024), (7, 4), (6, 5), (1, 3)])
@pytest.mark.parametrize("fit", wavelets.FITS)
def test_wavelet_resize_hits_the_exact_size(source, target, fit):
    x = torch.randn(3, source, 2)
    out, _ = wavelets.wavelet_resize(x, 1, target, wavelet="db2", fit=fit, rescale_mean=False)
    assert out.shape == (3, target, 2)


def test_linear_resample_keeps_the_ends_and_interpolates():
    x = torch.tensor([0.0, 10.0, 20.0, 30.0])
    assert torch.allclose(wavelets.linear_resample(x, 0, 3), torch.tensor([0.0, 15.0, 30.0]))
    assert torch.allclose(wavelets.linear_resample(x, 0, 7), torch.arange(7.0) * 5)


def test_mean_rescale_keeps_a_constant_constant():
    x = torch.full((8, 6), 3.0)
    for name in ("haar", "db4", "bior2.2"):
        small, _ = wavelets.wavelet_resize(x, 0, 2, wavelet=name, fit="interp", rescale_mean=True)
        big, _ = wavelets.wavelet_resize(x, 1, 24, wavelet=name, fit="interp", rescale_mean=True)
        assert torch.allclose(small, torch.full_like(small, 3.0), atol=1e-5)
        assert torch.allclose(big, torch.full_like(big, 3.0), atol=1e-5)


def test_wavelet_names():
    assert wavelets.resolve_wavelet("db2", family="vit", direction="grow") == "db2"
    assert wavelets.resolve_wavelet("auto", family="vit", direction="grow") == "haar"
    assert wavelets.resolve_wavelet("auto", family="bert", direction="grow") == "bior6.8"
    assert wavelets.resolve_wavelet("auto", family="gpt2", direction="shrink") == "coif3"
    with pytest.raises(LgError, match="unknown wavelet 'morl'"):
        wavelets.resolve_wavelet("morl", family="vit", direction="grow")  # continuous: not allowed
