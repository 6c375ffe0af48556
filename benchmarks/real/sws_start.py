"""Where an SWS learngene starts on a real 12-layer model, by stage count.

Issue 30's real aim was missed by SWS at 500 steps (docs/learngenes.md "On
real weights"). One suspect: condensing starts each stage as the mean of
the teacher's layers the stage holds (SPEC.md "SWS"), and a pretrained
model's layers are not alike, so the mean of two or three of them may keep
little of what they compute. This measures that start, before any training:
the learngene `lg condense --method sws --stages N` begins from
(`lgcli.condense.starting_learngene`, made from the teacher), grown to
each size and scored by `lg eval --steps 0` (the classifier's head as it
is, its own preprocessing), for N from 1 to the teacher's depth (N = depth
is the teacher itself: one stage per layer).

    OMP_NUM_THREADS=1 python benchmarks/real/sws_start.py ~/.cache/lg-real/dinov2-s-fmnist \
        --stages 12,5,6,3,4,2,1 --sizes 12x384,6x384 --test-subset 1000 -o benchmarks/real/sws_start.jsonl
    OMP_NUM_THREADS=1 python benchmarks/real/sws_start.py examples/fmnist_vit.safetensors \
        --stages 1,2,3,5,6 --sizes 6x128,3x128 --test-subset 1000 -o benchmarks/real/sws_start_example.jsonl

One JSON line per (stages, size) as it lands (top-1 % on the first
`--test-subset` test images, the seconds to grow and score it); a rerun
skips the lines already written. Results: benchmarks/real/README.md "Where
SWS starts".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("teacher")
    parser.add_argument("--stages", default="1,2,3,4,5,6,12")
    parser.add_argument("--sizes", default="12x384,6x384")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--test-subset", default="1000")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()

    from lgcli.condense import starting_learngene
    from lgcli.learngene_files import save_learngene
    from lgcli.loading import load

    out = Path(args.output)
    done = set()
    if out.exists():
        done = {(r["stages"], r["size"]) for r in map(json.loads, out.read_text().splitlines())}
    loaded = load(args.teacher)
    with tempfile.TemporaryDirectory() as work:
        for stages in map(int, args.stages.split(",")):
            sizes = [s for s in args.sizes.split(",") if (stages, s) not in done]
            if not sizes:
                continue
            options = {"stages": stages}
            start = starting_learngene(loaded, "sws", options=options)
            gene = Path(work) / f"sws{stages}.lg.safetensors"
            save_learngene(gene, start, options=options, source=loaded.checkpoint, force=True)
            for size in sizes:
                depth, width = size.split("x")
                grown = Path(work) / f"sws{stages}-{size}"  # a folder: a Hugging Face model is one
                started = time.time()
                made = subprocess.run([sys.executable, "-m", "lgcli", "grow", str(gene), "--depth", depth, "--width",
                                       width, "-o", str(grown), "--force"], capture_output=True, text=True)
                if made.returncode:
                    sys.exit(f"lg grow {gene.name} to {size}: {made.stderr.strip()}")
                scored = subprocess.run([sys.executable, "-m", "lgcli", "eval", str(grown), "--data", args.data,
                                         "--steps", "0", "--test-subset", args.test_subset, "--json"],
                                        check=True, capture_output=True, text=True)
                report = json.loads(scored.stdout)
                row = {"stages": stages, "size": size, "top1": report["rows"][0]["final"]["top1"],
                       "seconds": round(time.time() - started, 1)}
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
