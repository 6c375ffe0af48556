"""Block ablation on SmolLM2-135M, 30 -> 20 layers: held-out KJV perplexity beside block influence and
angular distance (benchmarks/real/smollm2_study.jsonl: 190.6 and 154.1; the original 19.2).

For each row: `lg shrink <cache>/smollm2-135m --depth 20 --method block-ablation --ablation A --calibrate
<cache>/kjv/calibrate.txt --calibrate-samples 32 --calibrate-seq-len 128` into
<cache>/ablation/smollm2-d20-<row> (its wall time and the layers it kept recorded), then
benchmarks/real/smollm2_perplexity.py on that folder (8 x 256 tokens of test.txt, the same windows as every
other row). Rows land in benchmarks/real/block_ablation_smollm2.jsonl as they are measured; a row already
there is skipped (resumable). Run niced:

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/real/block_ablation_smollm2.py one-shot [greedy]
    python benchmarks/real/block_ablation_smollm2.py greedy --calibrate-samples 8    # a cheaper greedy row
"""

from __future__ import annotations

import argparse
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
RESULTS = HERE / "block_ablation_smollm2.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rows", nargs="+", choices=("one-shot", "greedy"))
    parser.add_argument("--calibrate-samples", type=int, default=32)
    args = parser.parse_args()
    done = set()
    if RESULTS.exists():
        done = {json.loads(line)["row"] for line in RESULTS.read_text().splitlines() if line.strip()}
    for ablation in args.rows:
        row = f"block-ablation-{ablation}-{args.calibrate_samples}x128"
        if row in done:
            continue
        folder = CACHE / "ablation" / f"smollm2-d20-{row}"
        shrink = ["shrink", str(CACHE / "smollm2-135m"), "--depth", "20", "--method", "block-ablation",
                  "--ablation", ablation, "--calibrate", str(CACHE / "kjv" / "calibrate.txt"),
                  "--calibrate-samples", str(args.calibrate_samples), "--calibrate-seq-len", "128"]
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "lgcli", *shrink, "-o", str(folder), "--force", "--json"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"lg {' '.join(shrink)} failed:\n{result.stderr}")
        shrink_seconds = time.perf_counter() - started
        report = json.loads(result.stdout)
        scored = HERE / f".{row}.jsonl"
        scored.unlink(missing_ok=True)
        subprocess.run([sys.executable, str(HERE / "smollm2_perplexity.py"), f"{row}={folder}", "--results",
                        str(scored), "--device", "cpu"], check=True)
        perplexity = json.loads(scored.read_text().splitlines()[0])
        scored.unlink()
        details = report["details"]
        record = {"benchmark": "block_ablation_smollm2", "row": row, "command": "lg " + " ".join(shrink),
                  "shrink_seconds": round(shrink_seconds, 1), "calibration_seconds": report.get("calibration_seconds"),
                  "kept_layers": details["kept_layers"],
                  "scores": {k: details[k] for k in ("ablation_scores", "ablation_rounds", "removal_order")
                             if k in details},
                  "perplexity": perplexity["perplexity"], "tokens": perplexity["tokens"],
                  "token_ids_sha256": perplexity["token_ids_sha256"], "perplexity_seconds": perplexity["seconds"],
                  "machine": f"{platform.machine()} CPU (2 cores shared), OMP_NUM_THREADS="
                             f"{os.environ.get('OMP_NUM_THREADS')}",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with RESULTS.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps({k: record[k] for k in ("row", "perplexity", "shrink_seconds")}), flush=True)


if __name__ == "__main__":
    main()
