"""Which training-free resize initialises best? The probe, side by side.

The example model (6 x 128) is shrunk with every training-free method and,
for BoT, every `--rescale` x `--qkv-axis` choice (at 3 x 64, a power-of-two
ratio) and both `--fit` choices (at 4 x 64: depth ratio 2/3); grown to
8 x 192 with BoT's `--fit` x `--rescale` choices and Heur-LG. Each result
and timm's random initialisation of the same shape are fine-tuned on the
Fashion-MNIST subset shipped with lg, at every rate of a small sweep and for
several data-order seeds; a row reports the mean over seeds at its best rate.

    OMP_NUM_THREADS=1 nice python benchmarks/probe_methods.py --json benchmarks/probe_methods_results.json

BoT's defaults in lgcli/methods/bot.py are set from this table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from lgcli.data import load_data
from lgcli.evaluate import ProbeSettings, evaluate
from lgcli.resize import resize_file

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"

# (row name, shape, method, options)
VARIANTS = [
    *[(f"bot rescale={r} qkv={q}", (3, 64), "bot", {"rescale": r, "qkv_axis": q, "fit": "interp"})
      for r in ("none", "mean", "std") for q in ("heads", "flat")],
    ("select", (3, 64), "select", {}),
    ("heur-lg", (3, 64), "heur-lg", {}),
    ("auto-lg", (3, 64), "auto-lg", {}),
    *[(f"bot fit={f} rescale={r}", (4, 64), "bot", {"fit": f, "rescale": r, "qkv_axis": "heads"})
      for f in ("interp", "crop") for r in ("none", "std")],
    ("select", (4, 64), "select", {}),
    # Growth (depth ratio 4/3, width 3/2), where the instinct matters most.
    *[(f"bot fit={f} rescale={r}", (8, 192), "bot", {"fit": f, "rescale": r, "qkv_axis": "heads"})
      for f in ("interp", "crop") for r in ("none", "std")],
    ("heur-lg", (8, 192), "heur-lg", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rates", default="3e-4,1e-3")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--test-subset", default="1000")
    parser.add_argument("--shapes", default="3x64,4x64,8x192", help="which target shapes to run")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]

    folder = Path(tempfile.mkdtemp(prefix="lg-probe-methods-"))
    by_shape: dict[tuple[int, int], list[tuple[str, str]]] = {}
    shapes = set(args.shapes.split(","))
    for name, (depth, width), method, options in VARIANTS:
        if f"{depth}x{width}" not in shapes:
            continue
        direction = "grow" if width > 128 else "shrink"
        path = folder / f"{name.replace(' ', '_').replace('=', '-')}-{depth}x{width}.safetensors"
        resize_file(str(EXAMPLE), str(path), direction=direction, method=method, depth=depth, width=width,
                    seed=0, **options)
        by_shape.setdefault((depth, width), []).append((name, str(path)))

    results = []
    for (depth, width), rows in by_shape.items():
        per_row: dict[str, list[dict]] = {}
        for seed in seeds:
            data = load_data("fashion-mnist-mini", test_subset=args.test_subset, seed=seed)
            settings = ProbeSettings(steps=args.steps, lr_sweep=rates, eval_every=max(1, args.steps // 6),
                                     seed=seed, progress=False)
            report = evaluate([p for _, p in rows], data, settings, baseline="random",
                              notify=lambda m: None)
            names = {p: n for n, p in rows}
            for row in report["rows"]:
                label = names.get(row["source"], "random")
                per_row.setdefault(label, []).append(row)
        for label, seed_rows in per_row.items():
            # Best rate by mean final top-1 over the seeds.
            by_rate: dict[float, list[dict]] = {}
            for row in seed_rows:
                for run in row.get("sweep") or [row]:
                    by_rate.setdefault(run["lr"], []).append(run)
            best_lr = max(by_rate, key=lambda lr: statistics.mean(r["final"]["top1"] for r in by_rate[lr]))
            runs = by_rate[best_lr]
            results.append({
                "shape": f"{depth}x{width}", "row": label, "best_lr": best_lr,
                "instinct_top1": statistics.mean(r["curve"][0]["top1"] for r in runs),
                "mean_top1": statistics.mean(r["mean_top1"] for r in runs),
                "final_top1": statistics.mean(r["final"]["top1"] for r in runs),
                "final_top1_per_seed": [r["final"]["top1"] for r in runs],
            })
            print(json.dumps(results[-1]), file=sys.stderr)

    print(f"| shape | row | best lr | top-1 @0 | mean top-1 | final top-1 (seeds {args.seeds}) |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['shape']} | {r['row']} | {r['best_lr']:g} | {r['instinct_top1']:.1f} | "
              f"{r['mean_top1']:.1f} | {r['final_top1']:.1f} ({', '.join(f'{x:.1f}' for x in r['final_top1_per_seed'])}) |")
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "rates": rates, "seeds": seeds,
                                         "test_subset": args.test_subset, "results": results}, indent=1))


if __name__ == "__main__":
    main()
