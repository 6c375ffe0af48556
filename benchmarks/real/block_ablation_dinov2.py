"""Block ablation against lg's other depth rules on the real DINOv2-S classifier, 12 -> 6 layers.

For each method: `lg shrink <cache>/dinov2-s-fmnist --depth 6 --method M [--calibrate fashion-mnist
--calibrate-samples 64]` into <cache>/ablation/dinov2-d6-<row>, then the step-0 top-1 of
`lg eval OUT --data fashion-mnist --steps 0 --test-subset 2000` (the head kept, the model's own
preprocessing). Rows are appended to benchmarks/real/block_ablation_dinov2.jsonl as they land; a row
already there is skipped (resumable). Run it niced:

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/real/block_ablation_dinov2.py
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("LG_REAL_CACHE", "~/.cache/lg-real")).expanduser()
SOURCE = CACHE / "dinov2-s-fmnist"
RESULTS = HERE / "block_ablation_dinov2.jsonl"
CALIBRATE = ("--calibrate", "fashion-mnist", "--calibrate-samples", "64")
ROWS = {
    "original": None,
    "block-ablation-greedy": ("--method", "block-ablation", "--ablation", "greedy", *CALIBRATE),
    "block-ablation-one-shot": ("--method", "block-ablation", "--ablation", "one-shot", *CALIBRATE),
    "select": ("--method", "select"),
    "block-influence": ("--method", "block-influence", *CALIBRATE),
    "angular": ("--method", "angular", *CALIBRATE),
}


def lg(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "lgcli", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"lg {' '.join(args)} failed:\n{result.stderr}")
    return result, time.perf_counter() - started


def main() -> None:
    done = set()
    if RESULTS.exists():
        done = {json.loads(line)["row"] for line in RESULTS.read_text().splitlines() if line.strip()}
    only = sys.argv[1:] or list(ROWS)
    for row in only:
        if row in done:
            continue
        record: dict = {"benchmark": "block_ablation_dinov2", "row": row}
        folder = SOURCE
        if ROWS[row] is not None:
            folder = CACHE / "ablation" / f"dinov2-d6-{row}"
            shrink = ("shrink", str(SOURCE), "--depth", "6", *ROWS[row], "-o", str(folder), "--force", "--json")
            result, seconds = lg(*shrink)
            report = json.loads(result.stdout)
            details = report["details"]
            record.update(shrink_command="lg " + " ".join(shrink[:-2]), shrink_seconds=round(seconds, 1),
                          calibration_seconds=report.get("calibration_seconds"),
                          kept_layers=details.get("kept_layers", list(range(6))),
                          scores={k: details[k] for k in ("ablation_scores", "ablation_rounds", "removal_order",
                                                           "block_influence", "angular_distance") if k in details})
        evaluate = ("eval", str(folder), "--data", "fashion-mnist", "--steps", "0", "--test-subset", "2000", "--json")
        result, seconds = lg(*evaluate)
        scores = json.loads(result.stdout)
        record.update(eval_command="lg " + " ".join(evaluate), eval_seconds=round(seconds, 1),
                      top1=scores["rows"][0]["final"]["top1"], top5=scores["rows"][0]["final"]["top5"],
                      loss=scores["rows"][0]["final"]["loss"], machine=f"{platform.machine()} CPU, "
                      f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}",
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        with RESULTS.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps({k: record[k] for k in ("row", "top1") if k in record}), flush=True)


if __name__ == "__main__":
    main()
