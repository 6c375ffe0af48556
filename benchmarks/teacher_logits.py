"""What keeping the teacher's logits saves a condense run (issue 19, item 2).

`lgcli.train.TeacherLogits` keeps the frozen teacher's logits per image the
first time an image is seen; from the second epoch on a distillation step
skips the teacher's forward pass. This times `lgcli.condense.condense` (the
code `lg condense` runs: TLEG, started from the ancestry, batch 64) side by
side in one run, kept and not kept (MAX_TEACHER_CACHE_BYTES = 0), the cases
interleaved and repeated, over `--epochs` passes of fashion-mnist-mini's
4,000 train images, and checks that both runs trained alike (their final
losses). Below one epoch nothing is seen twice, so nothing can be saved:
the figure to quote is the ratio at several epochs.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/teacher_logits.py [--epochs 4] [--repeats 2]

Results: a table on stdout and benchmarks/teacher_logits.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from lgcli import train as train_module  # noqa: E402
from lgcli.condense import CondenseSettings, condense  # noqa: E402
from lgcli.data import load_data  # noqa: E402

EXAMPLE = REPO / "examples" / "fmnist_vit.safetensors"


def run(kept: bool, steps: int, data) -> dict:
    limit = train_module.MAX_TEACHER_CACHE_BYTES
    train_module.MAX_TEACHER_CACHE_BYTES = limit if kept else 0
    try:
        started = time.perf_counter()
        _, _, report = condense(EXAMPLE, data, method="tleg", options={"depths": "2-12"},
                                settings=CondenseSettings(steps=steps, batch_size=64, progress=False),
                                notify=lambda message: None)
        return {"seconds": time.perf_counter() - started, "loss_last": report["loss_last"],
                "top1": report["accuracy"]["top1"]}
    finally:
        train_module.MAX_TEACHER_CACHE_BYTES = limit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=HERE / "teacher_logits.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_data("fashion-mnist-mini", seed=0)
    # condense holds out 20 % of an image folder; the embedded set has its own test split.
    steps = int(args.epochs * len(data.train) / 64)
    results: dict[str, list[dict]] = {"kept": [], "every step": []}
    for repeat in range(args.repeats):
        for kept in ((True, False) if repeat % 2 == 0 else (False, True)):
            results["kept" if kept else "every step"].append(run(kept, steps, data))
    summary = {case: {"seconds": round(statistics.median(r["seconds"] for r in runs), 1),
                      "loss_last": runs[0]["loss_last"], "top1": runs[0]["top1"]} for case, runs in results.items()}
    ratio = summary["kept"]["seconds"] / summary["every step"]["seconds"]
    report = {"steps": steps, "epochs": args.epochs, "train_images": len(data.train), "batch_size": 64,
              "threads": args.threads, "repeats": args.repeats, "cases": summary, "kept_over_every_step": round(ratio, 3),
              "runs": results}
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{steps} steps ({args.epochs:g} epochs of {len(data.train)} images), median of {args.repeats}:")
    for case, figures in summary.items():
        print(f"  {case:11} {figures['seconds']:7.1f} s   final loss {figures['loss_last']:.4f}   "
              f"top-1 {figures['top1']:.2f}")
    print(f"  kept / every step: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
