"""How sure a comparison is (SPEC.md "Measuring an initialisation",
"Uncertainty"): a 95 % interval for each figure, and which rows tie.

- Several seeds: the mean and Student's t-interval over the seeds,
  mean ± t(0.975, n − 1) · s / √n, s the sample standard deviation.
- One seed: a percentile bootstrap over the test examples: resample the
  examples with replacement `resamples` times (seeded), recompute the
  figure, and take the 2.5th and 97.5th percentiles.
- Two rows tie when their intervals overlap; a size's verdict names the best
  row by its mean and every row that ties with it.

Pure functions of lists of numbers (no torch), so each is checked entry by
entry against its formula.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 1000


def student_t_quantile(probability: float, degrees: int) -> float:
    """The `probability` quantile of Student's t with `degrees` degrees of
    freedom, by bisection on its distribution function."""
    if degrees < 1:
        raise ValueError("Student's t needs at least one degree of freedom")
    if not 0 < probability < 1:
        raise ValueError("a quantile's probability lies in (0, 1)")
    if probability < 0.5:
        return -student_t_quantile(1 - probability, degrees)
    low, high = 0.0, 1.0
    while student_t_cdf(high, degrees) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if student_t_cdf(middle, degrees) < probability:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def student_t_cdf(t: float, degrees: int) -> float:
    """P(T <= t) = 1 − I_x(ν/2, 1/2) / 2 for t >= 0, x = ν / (ν + t²) (the
    regularised incomplete beta function)."""
    x = degrees / (degrees + t * t)
    tail = 0.5 * regularized_incomplete_beta(x, degrees / 2, 0.5)
    return 1 - tail if t >= 0 else tail


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by its continued fraction (Lentz's method; Numerical
    Recipes §6.4), using the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where
    that converges faster."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(x, a, b) / a
    return 1 - front * _beta_fraction(1 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return result


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, float]:
    """{mean, low, high, n}: the mean over seeds and its t-interval (one
    value: no interval, low = high = the value)."""
    n = len(values)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "low": mean, "high": mean, "n": 1, "kind": "none"}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = student_t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "kind": "t over seeds"}


def bootstrap_interval(values: Sequence[float], weights: Sequence[float] | None = None, *,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                       confidence: float = CONFIDENCE) -> dict[str, float]:
    """{mean, low, high, n}: the figure Σv / Σw over the test examples (w = 1:
    the mean; a text window's loss sum over its tokens) and its percentile
    bootstrap interval: `resamples` draws of as many examples, with
    replacement, from a seeded generator."""
    n = len(values)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    weights = [1.0] * n if weights is None else list(weights)
    rng = random.Random(seed)
    figure = sum(values) / sum(weights)
    draws = []
    for _ in range(resamples):
        picked = [rng.randrange(n) for _ in range(n)]
        draws.append(sum(values[i] for i in picked) / sum(weights[i] for i in picked))
    draws.sort()
    tail = (1 - confidence) / 2
    return {"mean": figure, "low": percentile(draws, tail), "high": percentile(draws, 1 - tail), "n": n,
            "kind": "bootstrap over test examples"}


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The `fraction` quantile of sorted values, linearly interpolated
    between the closest ranks (numpy's default, 'linear')."""
    position = fraction * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["low"] <= b["high"] and b["low"] <= a["high"]


def verdict(intervals: dict[str, dict[str, float]], higher_is_better: bool = True) -> dict[str, object]:
    """{best, tied}: the row with the best mean, and every other row whose
    interval overlaps the best's (a tie: the data cannot tell them apart)."""
    if not intervals:
        return {"best": None, "tied": []}
    best = (max if higher_is_better else min)(intervals, key=lambda name: intervals[name]["mean"])
    tied = [name for name, interval in intervals.items() if name != best and overlap(interval, intervals[best])]
    return {"best": best, "tied": tied}


__all__ = ["t_interval", "bootstrap_interval", "verdict", "student_t_quantile", "overlap", "CONFIDENCE"]
