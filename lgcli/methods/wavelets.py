"""One-axis wavelet resampling in torch, with pywavelets' filter banks and
pywavelets' `mode='periodization'` conventions (SPEC.md, "BoT").

Why not call pywt directly: pywt works in numpy on the CPU, makes float64
copies of whole stacks and is about 3x slower than strided torch views on the
stacks BoT transforms. The functions here reproduce `pywt.dwt(x, w,
'periodization')[0]` and `pywt.idwt(cA, None, w, 'periodization')` exactly
(tests/test_methods_wavelets.py checks every pywt discrete wavelet against
pywt), take their filters from `pywt.Wavelet`, and run on any torch device.

pywt's periodization, written out (K = filter length, always even):

- analysis, n -> m = ceil(n / 2): an odd-length signal is first extended by
  repeating its last sample (ne = n + 1), then
  ``cA[i] = sum_k dec_lo[k] * x[(2i + K/2 - k) mod ne]``
- synthesis from cA alone (all details zero), m -> 2m:
  ``x[(2i + k - (K/2 - 1)) mod 2m] += rec_lo[k] * cA[i]``

Because the n-D DWT is separable, the 3-D approximation band of BoT (and its
zero-detail inverse) is these 1-D maps applied axis by axis, in any order.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..errors import UsageError
from ..lazy import pywt, torch
from ..stack import index_along

DEFAULT_WAVELET = "haar"
AUTO = "auto"
FITS = ("interp", "crop")
RESCALES = ("none", "mean", "std")

def resolve_wavelet(name: str, *, family: str, direction: str) -> str:
    """The pywt wavelet name to use; `auto` picks the BoT paper's best for the
    family and direction (its adapter's `bot_wavelets`: bot.txt, "Choice of
    Wavelet Family"), else haar."""
    if name == AUTO:
        from ..arch import get_adapter

        return get_adapter(family).bot_wavelets.get(direction, DEFAULT_WAVELET)
    if name not in _discrete_wavelets():
        raise UsageError(  # a flag's value out of its range: exit status 2
            f"unknown wavelet '{name}': use 'auto' or a pywt discrete wavelet "
            "(haar, db1-db38, sym2-sym20, coif1-coif17, bior*.*, rbio*.*, dmey)")
    return name


@functools.lru_cache(maxsize=None)
def _discrete_wavelets() -> frozenset[str]:
    return frozenset(pywt.wavelist(kind="discrete"))


@functools.lru_cache(maxsize=None)
def _filters(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    wavelet = pywt.Wavelet(name)
    return tuple(wavelet.dec_lo), tuple(wavelet.rec_lo)


def haar_synthesis_taps() -> tuple[float, float]:
    """Haar's two synthesis (rec_lo) taps, as `idwt_approx` multiplies by them."""
    rec_lo = _filters("haar")[1]
    return rec_lo[0], rec_lo[1]


def mean_gain(name: str, direction: str) -> float:
    """The factor one level multiplies a constant signal by: 1/that undoes it
    (`--rescale mean`). For orthonormal wavelets it is sqrt(2) for analysis and
    1/sqrt(2) for zero-detail synthesis (SPEC.md, BoT "Scale")."""
    dec_lo, rec_lo = _filters(name)
    return sum(dec_lo) if direction == "shrink" else sum(rec_lo) / 2.0


def _axis_slice(ndim: int, axis: int, index) -> tuple:
    return (slice(None),) * axis + (index,)


def _circular_extend(x: torch.Tensor, axis: int, length: int, left: int, right: int,
                     last_valid: int) -> torch.Tensor:
    """`x` along `axis` seen as periodic with period `length` (positions past
    `last_valid` read the last valid sample: pywt's odd-length extension),
    padded by `left` and `right`. Returns `x` itself when nothing is needed."""
    if left == 0 and right == 0 and length == x.shape[axis]:
        return x
    positions = torch.arange(-left, length + right, device=x.device) % length
    positions = positions.clamp(max=last_valid)
    return index_along(x, axis, positions)


def dwt_approx(x: torch.Tensor, axis: int, wavelet: str) -> torch.Tensor:
    """One analysis level along `axis`, approximation band only:
    equals ``pywt.dwt(x, wavelet, mode='periodization', axis=axis)[0]``."""
    dec_lo, _ = _filters(wavelet)
    taps = len(dec_lo)
    n = x.shape[axis]
    extended = n + n % 2
    m = extended // 2
    # Raw indices 2i + K/2 - k span [1 - K/2, 2m - 2 + K/2].
    pad = taps // 2 - 1
    padded = _circular_extend(x, axis, extended, pad, pad, n - 1)
    out = None
    for k, weight in enumerate(dec_lo):
        start = taps // 2 - k + pad  # raw index of output 0, shifted by the left pad
        view = padded[_axis_slice(x.dim(), axis, slice(start, start + 2 * m - 1, 2))]
        if out is None:
            out = torch.mul(view, weight)
        else:
            out.add_(view, alpha=weight)
    return out


def idwt_approx(x: torch.Tensor, axis: int, wavelet: str) -> torch.Tensor:
    """One synthesis level along `axis` from the approximation band with all
    details zero: equals ``pywt.idwt(x, None, wavelet, 'periodization', axis=axis)``.

    Polyphase form of the synthesis sum: output 2t + p collects the taps k with
    k = p + K/2 - 1 (mod 2), reading cA[(t + (p + K/2 - 1 - k) / 2) mod m]."""
    _, rec_lo = _filters(wavelet)
    taps = len(rec_lo)
    m = x.shape[axis]
    centre = taps // 2 - 1
    shifts = {p: [(k, (p + centre - k) // 2) for k in range(taps) if (p + centre - k) % 2 == 0]
              for p in (0, 1)}
    all_shifts = [s for pairs in shifts.values() for _, s in pairs]
    left, right = max(0, -min(all_shifts)), max(0, max(all_shifts))
    padded = _circular_extend(x, axis, m, left, right, m - 1)
    out_shape = list(x.shape)
    out_shape[axis] = m
    out_shape.insert(axis + 1, 2)
    out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    for parity, pairs in shifts.items():
        phase = out.select(axis + 1, parity)
        for j, (k, shift) in enumerate(pairs):
            view = padded.narrow(axis, shift + left, m)
            if j == 0:
                torch.mul(view, rec_lo[k], out=phase)
            else:
                phase.add_(view, alpha=rec_lo[k])
    return out.flatten(axis, axis + 1)


def linear_resample(x: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    """Linear interpolation along `axis` to `size` samples, first and last
    samples kept (align_corners=True): position i of the output reads the
    source at i * (n - 1) / (size - 1)."""
    n = x.shape[axis]
    if size == n:
        return x
    if n == 1 or size == 1:  # one sample: repeat it / keep the first (align_corners)
        return x.narrow(axis, 0, 1).repeat_interleave(size, dim=axis)
    position = torch.arange(size, dtype=torch.float64) * ((n - 1) / (size - 1))
    below = position.floor().long().clamp(max=n - 2)
    frac = (position - below).to(x.dtype).to(x.device)
    shape = [1] * x.dim()
    shape[axis] = size
    frac = frac.view(shape)
    lower = index_along(x, axis, below)
    upper = index_along(x, axis, below + 1)
    return lower.mul_(1 - frac).add_(upper * frac)


def crop(x: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    """The first `size` samples along `axis`."""
    return x.narrow(axis, 0, size)


def plan_levels(source: int, target: int, fit: str) -> int:
    """Whole DWT (shrink) or IDWT (grow) levels to apply before the remaining
    factor is fitted (SPEC.md BoT "Exact target sizes").

    `interp`: the levels that do not overshoot the target, then interpolate.
    `crop`: the levels that reach or pass the target, then keep the first
    `target` samples (no padding is ever needed)."""
    levels, size = 0, source
    if target < source:
        while math.ceil(size / 2) >= target and size > 1:
            size, levels = math.ceil(size / 2), levels + 1
    elif target > source:
        if fit == "crop":
            while size < target:
                size, levels = size * 2, levels + 1
        else:
            while size * 2 <= target:
                size, levels = size * 2, levels + 1
    return levels


def plan_step(source: int, target: int, fit: str) -> dict[str, Any]:
    """What `wavelet_resize` does to an axis of `source` samples, from the
    sizes alone: the whole levels, and the fit of the remaining factor."""
    levels = plan_levels(source, target, fit)
    size = source
    for _ in range(levels):
        size = math.ceil(size / 2) if target < source else size * 2
    return {"levels": levels, **({"fit": f"{fit} {size}->{target}"} if size != target else {})}


def wavelet_resize(x: torch.Tensor, axis: int, target: int, *, wavelet: str,
                   fit: str, rescale_mean: bool) -> tuple[torch.Tensor, dict]:
    """Resize one axis: whole levels of the approximation band (shrink) or of
    zero-detail synthesis (grow), then the remaining factor by `fit`.
    Returns the tensor and a description of what was done."""
    source = x.shape[axis]
    if target == source:
        return x, {"levels": 0}
    direction = "shrink" if target < source else "grow"
    levels = plan_levels(source, target, fit)
    level_fn = dwt_approx if direction == "shrink" else idwt_approx
    gain = mean_gain(wavelet, direction)
    for _ in range(levels):
        x = level_fn(x, axis, wavelet)
        if rescale_mean:
            x.div_(gain)
    step = {"levels": levels}
    if x.shape[axis] != target:
        step["fit"] = f"{fit} {x.shape[axis]}->{target}"
        x = linear_resample(x, axis, target) if fit == "interp" else crop(x, axis, target).clone()
    return x, step
