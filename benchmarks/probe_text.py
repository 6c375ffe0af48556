"""How well does each training-free resize initialise a text model? The probe, side by side.

The example text ancestry (examples/kjv_llama: a 4 x 128 Llama with GQA,
trained on the King James Bible without John) is shrunk with bot, select,
heur-lg and auto-lg to depth only (2 x 128), width only (4 x 64) and both
(2 x 64), and grown with bot and clone to depth only (8 x 128) and both
(6 x 256). Beside them, BoT with each candidate wavelet at 2 x 64 and
6 x 256 (the paper's choices: BERT shrink haar / grow bior6.8, GPT shrink
coif3 / grow db2). Every result and transformers' random initialisation of
the same shape are fine-tuned on kjv-mini (Genesis, Mark and John; John is
text the ancestry never saw) with `lg eval`'s probe: test loss after N
steps, and steps to reach the random row's final loss.

    OMP_NUM_THREADS=2 python benchmarks/probe_text.py --json benchmarks/probe_text.json \
        > benchmarks/probe_text.md

The same rows come from the CLI, one shape at a time, e.g.

    lg shrink examples/kjv_llama --depth 2 --width 64 --method bot -o /tmp/bot
    lg eval /tmp/bot --data kjv-mini --steps 200 --eval-every 25 --batch-size 32 --lr 1e-3 --baseline random
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from lgcli.evaluate import ProbeSettings, evaluate
from lgcli.resize import resize_file

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kjv_llama"
# "bot" rows use --wavelet auto, which is haar for a Llama: the other candidates beside it.
WAVELETS = ("db2", "coif3", "bior6.8", "sym4")

# (row name, (depth, width), direction, method, options)
VARIANTS = [
    *[(method, shape, "shrink", method, {}) for shape in ((2, 128), (4, 64), (2, 64))
      for method in ("bot", "select", "heur-lg", "auto-lg")],
    *[(method, shape, "grow", method, {}) for shape in ((8, 128), (6, 256)) for method in ("bot", "clone")],
    *[(f"bot {w}", (2, 64), "shrink", "bot", {"wavelet": w}) for w in WAVELETS],
    *[(f"bot {w}", (6, 256), "grow", "bot", {"wavelet": w}) for w in WAVELETS],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--shapes", default="2x128,4x64,2x64,8x128,6x256", help="which target shapes to run")
    parser.add_argument("--wavelets", default=",".join(WAVELETS), help="which BoT wavelets to compare")
    parser.add_argument("--json", type=Path, help="write the results here (after every shape)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="lg-probe-text-"))
    by_shape: dict[tuple[int, int], list[tuple[str, str]]] = {}
    shapes = set(args.shapes.split(","))
    wavelets = set(args.wavelets.split(","))
    for name, (depth, width), direction, method, options in VARIANTS:
        if f"{depth}x{width}" not in shapes or options.get("wavelet", "haar") not in wavelets | {"haar"}:
            continue
        rows = by_shape.setdefault((depth, width), [])
        path = folder / f"{name.replace(' ', '_')}-{depth}x{width}"
        resize_file(str(EXAMPLE), str(path), direction=direction, method=method, depth=depth, width=width,
                    seed=0, notify=lambda m: None, **options)
        rows.append((name, str(path)))

    settings = ProbeSettings(steps=args.steps, lr=args.lr, batch_size=args.batch_size,
                             eval_every=max(1, args.steps // 8), progress=False)
    results = []
    for (depth, width), rows in by_shape.items():
        started = time.perf_counter()
        report = evaluate([p for _, p in rows], "kjv-mini", settings, baseline="random", notify=lambda m: None)
        names = {p: n for n, p in rows}
        for row in report["rows"]:
            results.append({"shape": f"{depth}x{width}", "row": names.get(row["source"], "random"),
                            "loss_at_0": row["instinct"]["loss"], "loss_final": row["final"]["loss"],
                            "steps_to_random_final": row.get("steps_to_random_final"),
                            "speedup": row.get("speedup"),
                            "curve": [(p["step"], round(p["loss"], 4)) for p in row["curve"]]})
            print(json.dumps({k: v for k, v in results[-1].items() if k != "curve"}), file=sys.stderr)
        print(f"{depth}x{width}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        if args.json:  # after every shape: a long run interrupted keeps what it finished
            args.json.write_text(json.dumps({"steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
                                             "results": results}, indent=1) + "\n")

    print(f"Test loss on kjv-mini (lower is better); {args.steps} steps at lr {args.lr:g}, batch "
          f"{args.batch_size} windows of 128 tokens; steps to reach the random row's final loss.\n")
    print(f"| shape | row | loss @0 | loss @{args.steps} | steps to random's final | speed-up |")
    print("|---|---|---|---|---|---|")
    for r in results:
        steps = "never" if r["steps_to_random_final"] is None else f"{r['steps_to_random_final']:g}"
        speedup = "" if r["speedup"] is None else f"{r['speedup']:g}x"
        print(f"| {r['shape']} | {r['row']} | {r['loss_at_0']:.3f} | {r['loss_final']:.3f} | {steps} | {speedup} |")


if __name__ == "__main__":
    main()
