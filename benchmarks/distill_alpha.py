"""Which `lg distill --alpha` heals a shrunk model best, over seeds.

On SmolLM2-135M shrunk to 20 layers, `--alpha 0.5` (half the next-token
loss) healed to a lower perplexity than the default alpha 1 (pure
distillation): benchmarks/real/smollm2_learngene.jsonl. This runs the same
comparison on lg's example ancestries, where a run takes seconds, so that
it carries seeds and a paired interval: each student is distilled at each
alpha with the same seeds (the same data order), and the per-seed
differences against alpha 1 give the interval that says whether the gap is
more than noise.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distill_alpha.py               # the example Llama, kjv-mini
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distill_alpha.py --teacher examples/fmnist_vit.safetensors \\
        --data fashion-mnist-mini --depth 3 --batch-size 64 --steps 200 --results benchmarks/distill_alpha_vit.jsonl

The student is the teacher shrunk to `--depth` by lg's default method
(weight selection: its first layers, as docs/cli.md's distill table). Each
run's held-out figures (perplexity or top-1, and KL from the teacher) land in
`--results` as one JSON line the moment it ends; a rerun skips the runs
there. The table (stdout) gives each alpha's mean with its 95 % t-interval
over seeds, and the mean paired difference against alpha 1 with its own.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from lgcli.intervals import t_interval  # noqa: E402

EXAMPLE_LLAMA = REPO / "examples" / "kjv_llama"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, default=EXAMPLE_LLAMA)
    parser.add_argument("--data", default="kjv-mini")
    parser.add_argument("--depth", type=int, default=2, help="the student's depth [2]")
    parser.add_argument("--seq-len", type=int, default=None, help="text only [128 for the example]")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", default="150,600", help="comma-separated step counts [150,600]")
    parser.add_argument("--alphas", default="1,0.5,0", help="comma-separated alphas [1,0.5,0]; 1 is the reference")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=HERE / "distill_alpha.jsonl")
    args = parser.parse_args()
    text = args.teacher.is_dir()
    seq_len = args.seq_len or (128 if text else None)
    alphas = [float(a) for a in args.alphas.split(",")]
    steps_list = [int(s) for s in args.steps.split(",")]
    figure = "perplexity" if text else "top1"

    done = {}
    if args.results.exists():
        for line in args.results.read_text().splitlines():
            row = json.loads(line)
            done[(row["teacher"], row["depth"], row["steps"], row["alpha"], row["seed"])] = row
    wanted = [(steps, alpha, seed) for steps in steps_list for alpha in alphas for seed in range(args.seeds)]
    if any((args.teacher.name, args.depth, *key) not in done for key in wanted):
        run_missing(args, wanted, done, seq_len, figure)

    print(f"{args.teacher.name} shrunk to depth {args.depth}, distilled on {args.data}: held-out {figure} "
          f"(mean and 95 % interval over {args.seeds} seeds; paired difference against alpha 1)")
    print(f"| steps | alpha | {figure} | difference from alpha 1 | KL from the teacher |")
    print("|---|---|---|---|---|")
    for steps in steps_list:
        reference = [done[(args.teacher.name, args.depth, steps, 1.0, seed)][figure] for seed in range(args.seeds)]
        for alpha in alphas:
            rows = [done[(args.teacher.name, args.depth, steps, alpha, seed)] for seed in range(args.seeds)]
            values = [row[figure] for row in rows]
            differences = [value - base for value, base in zip(values, reference)]
            kl = t_interval([row["kl"] for row in rows])
            print(f"| {steps} | {alpha:g} | {shown(t_interval(values))} | "
                  f"{'' if alpha == 1 else shown(t_interval(differences), signed=True)} | {shown(kl, 3)} |")
    return 0


def run_missing(args, wanted, done, seq_len, figure) -> None:
    import torch

    from lgcli.distill import DistillSettings, distill
    from lgcli.resize import resize_file

    student = Path(tempfile.mkdtemp()) / ("student" if args.teacher.is_dir() else "student.safetensors")
    resize_file(args.teacher, student, direction="shrink", depth=args.depth, notify=lambda m: None)
    reading = {"seq_len": seq_len} if seq_len else {}
    for steps, alpha, seed in wanted:
        if (args.teacher.name, args.depth, steps, alpha, seed) in done:
            continue
        started = time.perf_counter()
        _, report = distill(student, args.teacher, args.data, **reading, notify=lambda m: None,
                            settings=DistillSettings(steps=steps, batch_size=args.batch_size, seed=seed, alpha=alpha,
                                                     progress=False, device="cpu"))
        before, after = report["held_out"]["before"], report["held_out"]["after"]
        row = {"teacher": args.teacher.name, "data": args.data, "depth": args.depth, "steps": steps, "alpha": alpha,
               "seed": seed, "batch_size": args.batch_size, "seq_len": seq_len, figure: after[figure],
               "kl": after["kl"], f"{figure}_before": before[figure], "kl_before": before["kl"],
               "seconds": round(time.perf_counter() - started, 1),
               "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads",
               "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        with args.results.open("a") as out:
            out.write(json.dumps(row) + "\n")
        done[(args.teacher.name, args.depth, steps, alpha, seed)] = row
        print(row, file=sys.stderr, flush=True)


def shown(interval: dict, digits: int = 2, signed: bool = False) -> str:
    half = (interval["high"] - interval["low"]) / 2
    mean = f"{interval['mean']:+.{digits}f}" if signed else f"{interval['mean']:.{digits}f}"
    return f"{mean} ± {half:.{digits}f}"


if __name__ == "__main__":
    raise SystemExit(main())
