"""Does condensing's rate undo a width-trained SWS learngene's start from a
real teacher? A CPU pilot for the device study's `sws-widths-lr3e-4` row.

On the real DINOv2-S classifier, SWS trained at widths 192 and 384 ended
2-6 points under weight selection distilled for the same steps, and its
descendants started the probe lower (docs/learngenes.md "On real
weights"). One difference between the two paths was never isolated: `lg
condense` trains at 1e-3, `lg distill` at 3e-4, and AdamW's first steps move
each weight by about the rate. With a stage per layer (`--stages 12`) the
learngene starts as the teacher itself, channels in importance order, so a
rate that undoes that start would show within a short run.

Rows, each through lg's command line, at the same steps and batch (the
teacher the same for all; `--depths 12`: the one depth both paths build):

- ``sws-lr1e-3`` / ``sws-lr3e-4``: `lg condense --method sws --stages 12
  --widths 192,384 --width-rule sandwich --depths 12` at that rate, grown to
  12 x 192 and 12 x 384;
- ``select+distill``: `lg shrink --width 192 --method select`, then `lg
  distill` at its defaults (3e-4), at 12 x 192;

each scored by `lg eval --steps 0` (its own head, the classifier's
preprocessing) on the first `--test-subset` Fashion-MNIST test images. Far
from the device study's 500 steps of 256: this says only whether the rate
matters at the start.

    OMP_NUM_THREADS=2 python benchmarks/real/sws_rate_pilot.py ~/.cache/lg-real/dinov2-s-fmnist \\
        --steps 60 --batch-size 32 [--seed 1] -o benchmarks/real/sws_rate_pilot.jsonl

One JSON line per row, size and seed as it lands; a rerun skips those written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LG = [sys.executable, "-m", "lgcli"]


def lg(*args: str) -> str:
    """Run lg; its stdout (the --json report), or exit with its error."""
    result = subprocess.run([*LG, *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"lg {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return result.stdout


def top1(model: str, data: str, test_subset: str) -> float:
    report = json.loads(lg("eval", model, "--data", data, "--steps", "0", "--test-subset", test_subset, "--json"))
    return report["rows"][0]["final"]["top1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("teacher")
    parser.add_argument("--data", default="fashion-mnist-mini")
    parser.add_argument("--steps", default="60")
    parser.add_argument("--batch-size", default="32")
    parser.add_argument("--test-subset", default="1000")
    parser.add_argument("--rows", default="sws-lr1e-3,sws-lr3e-4,select+distill")
    parser.add_argument("--seed", default="0", help="the data order and the condense run's draws")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    out = Path(args.output)
    done = ({(r["row"], r["size"], r.get("seed", 0)) for r in map(json.loads, out.read_text().splitlines())}
            if out.exists() else set())
    seed = int(args.seed)
    train = ["--data", args.data, "--steps", args.steps, "--batch-size", args.batch_size, "--seed", args.seed,
             "--test-subset", "64"]
    with tempfile.TemporaryDirectory() as work:
        for row in args.rows.split(","):
            sizes = ["12x192"] if row == "select+distill" else ["12x192", "12x384"]
            if all((row, size, seed) in done for size in sizes):
                continue
            started = time.perf_counter()
            if row == "select+distill":
                shrunk, healed = f"{work}/select", f"{work}/select-healed"
                lg("shrink", args.teacher, "--width", "192", "--method", "select", "-o", shrunk)
                lg("distill", shrunk, "--teacher", args.teacher, *train, "-o", healed)
                built = {"12x192": healed}
            else:
                gene = f"{work}/{row}.lg.safetensors"
                rate = row.removeprefix("sws-lr")
                lg("condense", args.teacher, "--method", "sws", "--stages", "12", "--widths", "192,384",
                   "--width-rule", "sandwich", "--depths", "12", "--lr", rate, *train, "-o", gene)
                built = {}
                for size in sizes:
                    width = size.split("x")[1]
                    built[size] = f"{work}/{row}-{size}"
                    lg("grow", gene, "--depth", "12", "--width", width, "-o", built[size])
            trained = round(time.perf_counter() - started, 1)
            with out.open("a") as sink:
                for size, model in built.items():
                    record = {"row": row, "size": size, "seed": seed, "top1": top1(model, args.data, args.test_subset),
                              "steps": int(args.steps), "batch_size": int(args.batch_size),
                              "test_subset": int(args.test_subset), "train_seconds": trained}
                    sink.write(json.dumps(record) + "\n")
                    sink.flush()
                    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
