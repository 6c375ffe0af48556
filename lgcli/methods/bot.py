"""BoT: wavelet shrink (approximation band of the DWT) and grow (inverse DWT
with zero details), SPEC.md "BoT" / bot.txt.

Every role is its own stack, so the transform never mixes roles: q, k and v
are three (layer, attn, embed) stacks, o, fc1, fc2 are (layer, out, in),
per-layer vectors (biases, norms, layer scale) are (layer, n) and globals are
transformed along their `embed` axis only (the BoT "3-D modules", with q/k/v
split as SPEC asks). The n-D DWT is separable, so the 3-D approximation band is
the 1-D transform applied along each changed axis in turn
(`wavelets.wavelet_resize`); each axis gets as many levels as its own size
change needs.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import LgError
from ..lazy import torch
from ..stack import ATTN, KV, ArchSpec, Named, Stack
from . import wavelets
from ..options import Option
from .common import (GROW, SHRINK, AxisChange, Method, MethodContext, MethodResult, as_compute,
                     axis_changes, per_role, release)

# Defaults measured with the init-quality probe (benchmarks/probe_methods.py:
# the example Fashion-MNIST ViT shrunk to 3x64 and 4x64 and grown to 8x192,
# fine-tuned 300 steps at the better of two rates; SPEC: BoT's defaults "must
# be settled by the init-quality probe"):
# - rescale none (the paper's raw coefficients): best final top-1 shrinking to
#   3x64 (82.0 against std 80.4, mean 72.7; 2 seeds) and growing to 8x192
#   (87.0 against std 86.2, with step-0 accuracy 77.2 against 49.6).
# - fit interp: growing 6->8 layers, crop started at 17.5 % and ended at 83.5
#   against interp's 77.2 and 87.0; shrinking 6->4, crop was 0.9 points better
#   (82.6 against 81.7), within twice the seed spread.
# - qkv_axis heads: with the head dim fixed a head stays a head; it matched or
#   beat flat (82.0 against 81.7 with none, 80.4 against 79.3 with std).
# - haar: the paper's choice for ViTs; the shortest filter, so it mixes only
#   neighbouring units/layers (other wavelets were not probed).
OPTIONS = (
    Option("wavelet", str, wavelets.DEFAULT_WAVELET,
           "a pywt discrete wavelet (haar, db2, coif3, bior6.8, ...), or auto: the BoT paper's best "
           "for the family and direction"),
    Option("fit", str, "interp", "a ratio that is not a power of two: interpolate or crop/pad the "
           "remaining factor", choices=wavelets.FITS),
    Option("qkv_axis", str, "heads", "transform q, k, v along the heads axis, or the flat attention "
           "axis", choices=("heads", "flat")),
    Option("rescale", str, "none", "none: the raw approximation band; mean: undo the sqrt(2) per "
           "level; std: match each tensor's source std", choices=wavelets.RESCALES),
)


# Axes laid out as (heads, head_dim): queries' and keys'/values' (grouped-query attention).
HEAD_AXES = (ATTN, KV)


def bot(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
        context: MethodContext) -> MethodResult:
    wavelet = wavelets.resolve_wavelet(options["wavelet"], family=source.family,
                                       direction=context.direction)

    def resize(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        changes = axis_changes(named, source, target)
        if not changes:
            return named.data
        moments = None
        if options["rescale"] == "std":
            moments = (*population_moments(as_compute(named.data)), named.data.numel())
        resized = _resize_tensor(as_compute(release(named)), changes, source, target, wavelet=wavelet,
                                 fit=options["fit"], qkv_axis=options["qkv_axis"],
                                 rescale=options["rescale"])
        return resized if moments is None else match_moments(resized, moments)

    # One role at a time, when the writer asks: only that role's intermediates
    # are alive. The report says what happens to each axis from the sizes alone.
    out = per_role(stack, target, resize)
    report = {"wavelet": wavelet, "mode": "periodization", "axes": axes_report(stack, source, target, options)}
    return MethodResult(out, report)


def axes_report(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any]) -> dict[str, Any]:
    """Per changed axis kind: its sizes, the whole wavelet levels and the fit
    of the remaining factor (the attention axis by heads and head dim with
    --qkv-axis heads), for the axes the stack's roles have."""
    present = {axis for _, axes, _, _ in stack.shapes() for axis in axes}
    before, after = source.axis_sizes(), target.axis_sizes()
    report: dict[str, Any] = {}
    for axis in before:
        if axis not in present or before[axis] == after[axis]:
            continue
        if axis in HEAD_AXES and options["qkv_axis"] == "heads":
            label = "heads" if axis == ATTN else "kv heads"
            for name, a, b in ((label, source.heads_of(axis), target.heads_of(axis)),
                               ("attn head_dim", source.head_dim, target.head_dim)):
                if a != b:
                    report[name] = {"from": a, "to": b, **wavelets.plan_step(a, b, options["fit"])}
            continue
        report[axis] = {"from": before[axis], "to": after[axis],
                        **wavelets.plan_step(before[axis], after[axis], options["fit"])}
    return report


def _resize_tensor(data: torch.Tensor, changes: list[AxisChange], source: ArchSpec,
                   target: ArchSpec, *, wavelet: str, fit: str, qkv_axis: str, rescale: str) -> torch.Tensor:
    rescale_mean = rescale == "mean"
    if wavelet == "haar":
        grown = _haar_growth(data, changes, source, target, fit=fit, qkv_axis=qkv_axis, rescale_mean=rescale_mean)
        if grown is not None:
            return grown
    # Largest reduction (shrink) / smallest growth (grow) first keeps the
    # intermediates small; the result does not depend on the order.
    for change in sorted(changes, key=lambda c: c.target / c.source):
        if change.axis in HEAD_AXES and qkv_axis == "heads":
            data = _resize_attn_by_heads(data, change, source, target, wavelet=wavelet,
                                         fit=fit, rescale_mean=rescale_mean)
            continue
        data, _ = wavelets.wavelet_resize(data, change.dim, change.target, wavelet=wavelet,
                                          fit=fit, rescale_mean=rescale_mean)
    return data


def _haar_growth(data: torch.Tensor, changes: list[AxisChange], source: ArchSpec, target: ArchSpec, *,
                 fit: str, qkv_axis: str, rescale_mean: bool) -> torch.Tensor | None:
    """Haar's zero-detail synthesis in one pass, when every changed axis grows
    by a power of two: a level repeats each sample twice, times rec_lo = 1/sqrt(2)
    (`wavelets.idwt_approx` with K = 2). Every output element is therefore its
    source sample multiplied by rec_lo once per level, in sequence (and divided
    by the gain after each, with --rescale mean), whichever axis the level is
    on. So the multiplications run on the small source and one broadcast copy
    writes the result: the same values, bit for bit, as level after level, at
    a third of the memory traffic. None when an axis shrinks or needs a fit."""
    weight, other = wavelets.haar_synthesis_taps()
    if weight != other:
        return None
    growth: dict[int, int] = {}  # dim of the (heads-unflattened) view -> repeats
    by_heads = next((c for c in changes if c.axis in HEAD_AXES and qkv_axis == "heads"), None)
    unflatten_at = None if by_heads is None else by_heads.dim
    for change in changes:
        shift = 1 if unflatten_at is not None and change.dim > unflatten_at else 0
        if change.dim == unflatten_at:
            pairs = [(change.dim, source.heads_of(change.axis), target.heads_of(change.axis)),
                     (change.dim + 1, source.head_dim, target.head_dim)]
        else:
            pairs = [(change.dim + shift, change.source, change.target)]
        for dim, before, after in pairs:
            if before == after:
                continue
            step = wavelets.plan_step(before, after, fit)
            if after < before or "fit" in step:
                return None  # shrinking, or a factor whole levels do not reach: the general path
            growth[dim] = 2 ** step["levels"]
    if by_heads is not None:
        data = data.unflatten(unflatten_at, (source.heads_of(by_heads.axis), source.head_dim))
    gain = wavelets.mean_gain("haar", "grow")
    levels = sum(repeats.bit_length() - 1 for repeats in growth.values())
    for level in range(levels):
        data = torch.mul(data, weight) if level == 0 else data.mul_(weight)
        if rescale_mean:
            data.div_(gain)
    shape, expanded = [], []
    for dim, size in enumerate(data.shape):
        shape += [size, 1] if dim in growth else [size]
        expanded += [size, growth[dim]] if dim in growth else [size]
    out = data.reshape(shape).expand(expanded).reshape([s * growth.get(d, 1) for d, s in enumerate(data.shape)])
    return out.flatten(unflatten_at, unflatten_at + 1) if unflatten_at is not None else out


def _resize_attn_by_heads(data: torch.Tensor, change: AxisChange, source: ArchSpec, target: ArchSpec, *,
                          wavelet: str, fit: str, rescale_mean: bool) -> torch.Tensor:
    """Head-aware transform of an `attn` (or key/value `kv`) axis: view it as
    (heads, head_dim) and transform along heads (and head_dim, if that
    changes too)."""
    dim, axis = change.dim, change.axis
    data = data.unflatten(dim, (source.heads_of(axis), source.head_dim))
    for offset, before, after in ((0, source.heads_of(axis), target.heads_of(axis)),
                                  (1, source.head_dim, target.head_dim)):
        if before != after:
            data, _ = wavelets.wavelet_resize(data, dim + offset, after, wavelet=wavelet, fit=fit,
                                              rescale_mean=rescale_mean)
    return data.flatten(dim, dim + 1)


def match_moments(resized: torch.Tensor, moments: tuple[float, float, int]) -> torch.Tensor:
    """`--rescale std`: an affine map giving the resized tensor the source
    tensor's mean and (population) standard deviation (`moments`, from
    `population_moments` of the source), one pair per role stack. A constant
    result is only shifted. `resized` is modified in place (BoT always hands
    over a fresh tensor)."""
    source_mean, source_std, count = moments
    if resized.numel() < 2 or count < 2:
        return resized
    resized_mean, resized_std = population_moments(resized)
    scale = source_std / resized_std if resized_std > 1e-12 * max(1.0, abs(resized_mean)) else 1.0
    shift = torch.tensor(source_mean - resized_mean * scale, dtype=resized.dtype, device=resized.device)
    return torch.add(shift, resized, alpha=scale, out=resized)  # one pass: shift + scale * resized


# Elements per row of `population_moments`' fixed reshape: under torch's
# parallel grain (32768 elements), so a lone row is reduced serially, and long
# enough that the per-row Python floats stay few (25 000 for 100M entries).
MOMENT_ROW = 4096


def population_moments(tensor: torch.Tensor) -> tuple[float, float]:
    """Mean and (population) standard deviation, the same bits whatever
    torch's thread count, fast and accurate.

    A float32 sum or BLAS dot over a whole tensor is split among threads, so
    its rounding (and `--rescale std`'s output bytes) changed with the
    machine's thread count. Here the tensor is cut into rows of MOMENT_ROW
    entries in a fixed way (a shorter last row); torch reduces each row in
    one thread, in an order fixed by the row's length, threads sharing out
    whole rows, and the row results (float32 sums and sums of squares, each
    widened exactly to a Python float) are added exactly by `math.fsum`. On
    100M entries this agrees with a float64 reference to ~1e-10 (mean) and
    ~1e-8 (variance), where one float32 dot over everything was ~4e-3 off
    in the variance. Speed is that of one sum and one dot (~0.03 s on 400 MB,
    benchmarks/moments.py); torch.std_mean (Welford) takes ~0.45 s, a
    float64 copy twice the memory. A row's sum of squares is read back from
    its float32 2-norm (one rounding, ~1e-7), and E[x^2] - mean^2 multiplies
    that by 1 + mean^2 / variance, so a tensor whose mean outweighs its
    spread (LayerNorm gains near 1; rarely a large matrix) is measured again
    about its mean."""
    # A view (a layer slice of a larger stack) is read layer by layer (each
    # layer is contiguous) rather than copied whole.
    parts = [tensor.reshape(-1)] if tensor.is_contiguous() else [p.reshape(-1) for p in tensor]
    count = tensor.numel()
    mean = math.fsum(value for part in parts for value in _row_sums(part)) / count
    variance = math.fsum(value for part in parts for value in _row_squares(part)) / count - mean * mean
    if mean * mean > max(variance, 0.0):
        # Centred about the float32 mean `centre`: Var = E[(x - c)^2] - (E[x] - c)^2, exact in c.
        centre = float(torch.tensor(mean, dtype=tensor.dtype))
        squares = math.fsum(value for part in parts for value in _row_squares(part - centre))
        variance = squares / count - (mean - centre) ** 2
    return mean, max(variance, 0.0) ** 0.5


def _rows(flat: torch.Tensor) -> list[torch.Tensor]:
    """`flat` as (rows, MOMENT_ROW) and, if entries remain, one shorter row."""
    whole = flat.numel() // MOMENT_ROW * MOMENT_ROW
    rows = [flat[:whole].view(-1, MOMENT_ROW)] if whole else []
    return rows + ([flat[whole:].view(1, -1)] if whole < flat.numel() else [])


def _row_sums(flat: torch.Tensor) -> list[float]:
    return [value for rows in _rows(flat) for value in rows.sum(dim=1).tolist()]


def _row_squares(flat: torch.Tensor) -> list[float]:
    # The 2-norm along the last axis is torch's one-pass row reduction (no
    # squared copy); squaring it back in float64 costs one rounding.
    return [value * value for rows in _rows(flat)
            for value in torch.linalg.vector_norm(rows, 2, dim=1).tolist()]


def validate(options: dict[str, Any], source: ArchSpec, target: ArchSpec, direction: str) -> None:
    """Reject an unknown wavelet now, before any work (one line, LgError)."""
    wavelets.resolve_wavelet(options["wavelet"], family=source.family, direction=direction)
    if options["qkv_axis"] == "heads" and source.attn_dim % max(source.heads, 1):
        raise LgError("--qkv-axis heads needs the attention width to be heads x head_dim")


METHOD = Method("bot", bot, (SHRINK, GROW),
                "BoT: wavelet approximation band (shrink) / zero-detail inverse DWT (grow)",
                OPTIONS, validate)
