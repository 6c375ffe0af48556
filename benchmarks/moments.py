"""What making `--rescale std`'s moments and PEG's mixtures independent of the
thread count costs (tests/test_thread_invariance.py holds the bytes).

    .venv/bin/python benchmarks/moments.py [--elements 100000000] [--threads 1 2] [--repeats 5] [--out FILE]

- moments: `bot.population_moments` (row-wise reductions, math.fsum) against
  the formula it replaced (one float32 sum and one BLAS dot over the whole
  tensor), on a float32 tensor of --elements entries (N(0.01, 0.3), a size
  not divisible by the row length), median of --repeats; the error of each
  against float64 moments; and whether each gives the same bits under every
  --threads count.
- PEG: `peg.weighted_sum` against the einsum it replaced, mixing 6 FFN
  matrices of 3072 x 768 (ViT-B's fc1) into 24 (a 24-layer descendant).

Results are printed and written as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lgcli.learngenes.peg import weighted_sum  # noqa: E402
from lgcli.methods.bot import population_moments  # noqa: E402


def previous_moments(tensor: torch.Tensor) -> tuple[float, float]:
    """The formula before: a float32 sum and a BLAS dot over everything."""
    flat = tensor.reshape(-1)
    mean = float(flat.sum()) / flat.numel()
    variance = float(torch.dot(flat, flat)) / flat.numel() - mean * mean
    return mean, max(variance, 0.0) ** 0.5


def median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=100_000_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    tensor = torch.randn(args.elements + 1234, generator=generator) * 0.3 + 0.01
    exact = tensor.double()
    reference_mean = float(exact.mean())
    reference_std = float(exact.std(unbiased=False))
    del exact
    weights = torch.softmax(torch.randn(24, 6, generator=generator), dim=1)
    parts = torch.randn(6, 3072, 768, generator=generator)
    results: dict = {"elements": tensor.numel(), "threads": {}, "torch_threads_default": torch.get_num_threads()}
    bits: dict[str, set] = {"population_moments": set(), "previous_moments": set()}
    for count in args.threads:
        torch.set_num_threads(count)
        row = {}
        for name, function in (("population_moments", population_moments), ("previous_moments", previous_moments)):
            mean, std = function(tensor)
            bits[name].add((mean, std))
            row[name] = {"seconds": median_seconds(lambda: function(tensor), args.repeats),
                         "mean_error": abs(mean - reference_mean) / max(abs(reference_mean), reference_std),
                         "std_relative_error": abs(std - reference_std) / reference_std}
        row["peg weighted_sum 24x6 fc1"] = {
            "seconds": median_seconds(lambda: weighted_sum(weights, parts), args.repeats)}
        row["peg einsum 24x6 fc1 (before)"] = {
            "seconds": median_seconds(lambda: torch.einsum("tp,p...->t...", weights, parts), args.repeats)}
        results["threads"][count] = row
        for name, value in row.items():
            errors = "".join(f"  {key} {value[key]:.1e}" for key in ("mean_error", "std_relative_error")
                             if key in value)
            print(f"threads {count}  {name:30s} {value['seconds']:.4f} s{errors}", flush=True)
    results["same_bits_under_every_thread_count"] = {name: len(found) == 1 for name, found in bits.items()}
    print("same bits under every thread count:", results["same_bits_under_every_thread_count"])
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
