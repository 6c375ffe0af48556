"""Which learning rate and warm-up should `lg eval --steps` use by default?

The probe fine-tunes already-initialised models; a rate or warm-up suited to
training from scratch can first destroy part of what the initialisation
knows (a prototype saw a well-initialised model lose 7 points in its first
100 steps under a 5e-4 one-cycle warm-up). This script measures, side by side
in one run, for the example model, models shrunk from it, and timm's random
initialisation of the same shape:

- the dip: the largest drop of test top-1 below its step-0 value,
- the final test top-1 and the mean top-1 over the curve (learning speed),

for each (learning rate, warm-up) on the embedded Fashion-MNIST subset.

    nice python benchmarks/probe_lr.py --steps 200 --json benchmarks/probe_lr.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from lgcli.data import load_data
from lgcli.evaluate import ProbeSettings, evaluate

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"


def shrunk_models(example: Path, folder: Path, shrinks: list[str]) -> list[str]:
    """Shrink the example model by each "method:depth:width" with lg's resize."""
    from lgcli.resize import resize_file

    paths = []
    for shrink in shrinks:
        method, depth, width = shrink.split(":")
        path = folder / f"{method}-{depth}x{width}.safetensors"
        resize_file(str(example), str(path), direction="shrink", method=method, depth=int(depth),
                    width=int(width), force=True)
        paths.append(str(path))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default=str(EXAMPLE), help="the well-initialised model to start from")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--rates", default="1e-4,3e-4,1e-3")
    parser.add_argument("--warmups", default="0,20")
    parser.add_argument("--shrink", default="bot:3:64,select:3:64",
                        help="comma-separated method:depth:width shrinks of the example model")
    parser.add_argument("--no-example", action="store_true", help="leave the full example model out")
    parser.add_argument("--test-subset", default="500")
    parser.add_argument("--json", help="write all figures here")
    args = parser.parse_args()

    data = load_data("fashion-mnist-mini", test_subset=args.test_subset, seed=0)
    rates = [float(r) for r in args.rates.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        paths = shrunk_models(Path(args.example), Path(folder), [s for s in args.shrink.split(",") if s])
        if not args.no_example:
            paths.insert(0, str(args.example))
        for warmup in (int(w) for w in args.warmups.split(",")):
            settings = ProbeSettings(steps=args.steps, lr_sweep=rates, warmup=warmup, eval_every=args.eval_every,
                                     progress=False)
            report = evaluate(paths, data, settings, baseline="random", notify=lambda m: None)
            for row in report["rows"]:
                for run in row["sweep"]:
                    results.append({"model": row["name"], "warmup": warmup, "lr": run["lr"],
                                    "instinct": row["instinct"]["top1"], "final": run["final"]["top1"],
                                    "mean_top1": run["mean_top1"], "dip": run["dip"],
                                    "curve": [(p["step"], round(p["top1"], 2)) for p in run["curve"]]})
            print(f"warm-up {warmup} done", file=sys.stderr, flush=True)
    print(f"{'model':28} {'warmup':>6} {'lr':>7} {'top1@0':>7} {'dip':>6} {'final':>7} {'mean':>7}")
    for r in results:
        print(f"{r['model']:28} {r['warmup']:>6} {r['lr']:>7g} {r['instinct']:>7.2f} {r['dip']:>6.2f} "
              f"{r['final']:>7.2f} {r['mean_top1']:>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"steps": args.steps, "test_images": len(data.test),
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
