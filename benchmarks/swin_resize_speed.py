"""How long `lg shrink` and `lg grow` of a Swin-T-sized timm Swin take, in
two source trees of lgcli, alternated (a change's cost, on one machine).

    .venv/bin/python benchmarks/swin_resize_speed.py --base /tmp/main_tree --new . [--rounds 7]

A random `swin_tiny_patch4_window7_224` (28 M parameters, fp32, 113 MB) is
written once to --folder with lg's metadata; each round runs, in a fresh
process per tree (PYTHONPATH pointing at it), BoT shrink to depths 2,2,3,2
and width 64 and BoT grow to depths 2,2,8,2 and width 128, the trees' order
swapped every round. The whole process is timed (imports included: the
same in both trees). Printed as JSON: each median and the ratios new/base;
the outputs of both trees are compared byte for byte.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", type=Path, required=True, help="a tree holding lgcli/ (the baseline)")
    parser.add_argument("--new", type=Path, required=True, help="a tree holding lgcli/ (the change)")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/lg-swin-bench"))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    trees = {"base": str(args.base.resolve()), "new": str(args.new.resolve())}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    source = args.folder / "swin_t.safetensors"
    if not source.exists():
        subprocess.run([sys.executable, "-c", "import timm, torch, lgcli; torch.manual_seed(0); lgcli.save_model("
                        f"timm.create_model('swin_tiny_patch4_window7_224', pretrained=False), {str(source)!r})"],
                       check=True, env={**env, "PYTHONPATH": trees["base"]})
    steps = {"shrink": ["shrink", str(source), "--depth", "2,2,3,2", "--width", "64", "--method", "bot"],
             "grow": ["grow", str(source), "--depth", "2,2,8,2", "--width", "128", "--method", "bot"]}
    times: dict[tuple[str, str], list[float]] = {(tree, step): [] for tree in trees for step in steps}
    for round_ in range(args.rounds):
        for step, command in steps.items():
            for tree in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
                out = args.folder / f"{tree}_{step}.safetensors"
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "lgcli", *command, "-o", str(out), "--force"], check=True,
                               capture_output=True, env={**env, "PYTHONPATH": trees[tree]})
                times[(tree, step)].append(time.perf_counter() - started)
    result = {f"{tree} {step} median s": round(statistics.median(v), 2) for (tree, step), v in times.items()}
    for step in steps:
        result[f"{step} new/base"] = round(statistics.median(times[("new", step)])
                                           / statistics.median(times[("base", step)]), 3)
        result[f"{step} outputs identical"] = filecmp.cmp(args.folder / f"base_{step}.safetensors",
                                                          args.folder / f"new_{step}.safetensors", shallow=False)
    result["rounds"] = args.rounds
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
