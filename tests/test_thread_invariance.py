"""The same input and seed give the same bytes whatever torch's thread count:
`lg` run on a 2-core laptop and on a 64-core server (or with
OMP_NUM_THREADS=1) writes identical files. Each check runs the same call
under 1, 2 and 4 threads in one process (the original count restored).

Before: `--rescale std`'s moments (a float32 sum and BLAS dot over a whole
stack) and PEG's mixtures (einsum, a BLAS product) rounded differently per
thread count, so `plain shrink 2x32 bot rescale=std,wavelet=db2` and
`peg 6x96` in tests/test_resize_golden.py passed or failed with the machine."""

from __future__ import annotations

import contextlib

import pytest
import torch

import make_resize_golden as golden
from conftest import make_vit
from lgcli.learngenes.peg import weighted_sum
from lgcli.methods.bot import MOMENT_ROW, population_moments

THREADS = (1, 2, 4)


@contextlib.contextmanager
def threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def under_each_thread_count(call):
    results = []
    for count in THREADS:
        with threads(count):
            results.append(call())
    return results


# Sizes around the row length, a lone short row, many rows with a remainder,
# and one large enough (> 32768 entries) that torch splits it among threads.
AWKWARD = [(7,), (1, MOMENT_ROW - 1), (3, MOMENT_ROW + 1), (5, 3, 1000), (4, 256, 64), (2, 20011),
           (33, MOMENT_ROW)]


@pytest.mark.parametrize("shape", AWKWARD, ids=str)
@pytest.mark.parametrize("location", [0.01, 1.0, 100.0])
def test_population_moments_are_the_same_bits_under_any_thread_count(shape, location):
    generator = torch.Generator().manual_seed(sum(shape))
    tensor = torch.randn(shape, generator=generator) * 0.3 + location
    # A contiguous stack and a view read layer by layer (its non-contiguous transpose).
    for view in (tensor, tensor.transpose(0, -1)):
        first, *others = under_each_thread_count(lambda: population_moments(view))
        assert all(found == first for found in others), (first, others)
    exact = tensor.double()
    mean, std = population_moments(tensor)
    reference_mean, reference_std = float(exact.mean()), float(exact.std(unbiased=False))
    # float32 inputs: within a few float32 roundings of the float64 moments.
    assert abs(mean - reference_mean) <= 5e-7 * max(abs(reference_mean), reference_std)
    assert abs(std - reference_std) <= 5e-7 * reference_std


def test_population_moments_of_a_constant_and_of_hand_made_values():
    assert population_moments(torch.full((3, 5000), 0.75)) == (0.75, 0.0)
    mean, std = population_moments(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert mean == 2.5 and std == pytest.approx(1.25 ** 0.5, rel=2e-7)


def test_weighted_sum_is_the_mixture_and_the_same_bits_under_any_thread_count():
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(6, 4, generator=generator)
    weights[2, 1] = 0.0  # an exact zero is skipped, and changes nothing
    parts = torch.randn(4, 32, 64, generator=generator)
    first, *others = under_each_thread_count(lambda: weighted_sum(weights, parts))
    assert all(torch.equal(found, first) for found in others)
    reference = torch.einsum("tp,p...->t...", weights.double(), parts.double())
    assert torch.allclose(first.double(), reference, rtol=0, atol=1e-5)
    # Entry by entry: the terms in order p = 0, 1, 2, 3.
    w, x = weights[5].tolist(), parts[:, 7, 9].tolist()
    expected = torch.tensor(x[0]) * torch.tensor(w[0])
    for p in range(1, 4):
        expected = expected + torch.tensor(x[p]) * torch.tensor(w[p])
    assert first[5, 7, 9].item() == expected.item()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    import lgcli
    from lgcli.condense import CondenseSettings, condense_file

    folder = tmp_path_factory.mktemp("threads")
    variant, overrides = golden.SOURCES["plain"]
    plain = folder / "plain.safetensors"
    lgcli.save_model(make_vit(variant, **overrides), plain)
    peg = folder / "peg.lg.safetensors"
    condense_file(plain, peg, method="peg", settings=CondenseSettings(seed=1), notify=lambda m: None)
    return {"plain": plain, "peg": peg}


# The two cases of tests/test_resize_golden.py whose bytes followed the thread count.
CASES = {"bot rescale=std,wavelet=db2": ("plain", "shrink", (2, 32), "bot", dict(wavelet="db2", rescale="std")),
         "peg 6x96": ("peg", "grow", (6, 96), None, {}),
         "peg 2x32": ("peg", "grow", (2, 32), None, {})}


@pytest.mark.parametrize("case", list(CASES))
def test_a_resize_writes_the_same_bytes_under_any_thread_count(case, sources, tmp_path):
    source, direction, size, method, options = CASES[case]
    first, *others = under_each_thread_count(
        lambda: golden.run_case(sources[source], tmp_path / "out.safetensors", direction, size, method, options))
    assert isinstance(first, dict) and first  # written, not refused
    for found in others:
        assert found == first, sorted(k for k in first if found[k] != first[k])


def test_condensing_a_peg_learngene_writes_the_same_bytes_under_any_thread_count(sources, tmp_path):
    from safetensors.torch import load_file

    from lgcli.condense import CondenseSettings, condense_file

    def condense():
        out = tmp_path / "again.lg.safetensors"
        condense_file(sources["plain"], out, method="peg", settings=CondenseSettings(seed=1), notify=lambda m: None,
                      force=True)
        return load_file(str(out))

    first, *others = under_each_thread_count(condense)
    for found in others:
        assert found.keys() == first.keys() and all(torch.equal(found[k], first[k]) for k in first)
