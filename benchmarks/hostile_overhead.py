"""What do the hostile-input checks cost a user, and what did the fast start buy?

Runs the same `lg` commands against two trees side by side in one run: this
checkout, and a baseline commit (default d50bd64, before the hostile-input
work) checked out with `git worktree` into a temporary folder and run with the
same interpreter through PYTHONPATH. The commands alternate (baseline, then
this tree, --repeats times) so that noise on a shared machine hits both alike;
the report is each command's median wall time per tree and the ratio
this / baseline.

- `lg --help` and `lg --version`: start-up (the baseline imports torch for them).
- `lg inspect FILE`: the strict header parse and metadata checks.
- `lg shrink FILE --depth 3 --width 64 -o OUT`: strict read, size checks,
  the timm-shape check and the read-back of the written file.

    .venv/bin/python benchmarks/hostile_overhead.py [--file examples/fmnist_vit.safetensors]
        [--baseline d50bd64] [--repeats 5]

Results: a table on stdout and benchmarks/hostile_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from condense_speed import _git_commit  # noqa: E402  (one copy of the helper)


def run_once(tree: Path, args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    # cwd = the tree: `python -m` puts the working folder first on sys.path.
    proc = subprocess.run([sys.executable, "-m", "lgcli", *args], cwd=tree, capture_output=True,
                          env={**env, "PYTHONPATH": str(tree)})
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"lg {' '.join(args)} failed in {tree}: {proc.stderr.decode()[-400:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(REPO / "examples" / "fmnist_vit.safetensors"))
    parser.add_argument("--baseline", default="d50bd64")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=str(HERE / "hostile_overhead.json"))
    options = parser.parse_args()

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as scratch:
        baseline = Path(scratch) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), options.baseline],
                       check=True, capture_output=True)
        try:
            out = Path(scratch) / "out.safetensors"
            commands = {
                "lg --help": ["--help"],
                "lg --version": ["--version"],
                "lg inspect": ["inspect", options.file],
                "lg shrink 3x64": ["shrink", options.file, "--depth", "3", "--width", "64", "-o", str(out),
                                   "--force"],
            }
            times: dict[str, dict[str, list[float]]] = {name: {"baseline": [], "this": []} for name in commands}
            for _ in range(options.repeats):
                for name, args in commands.items():
                    for label, tree in (("baseline", baseline), ("this", REPO)):
                        times[name][label].append(run_once(tree, args, env))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)],
                           capture_output=True)

    rows = []
    print(f"{'command':<16} {'baseline s':>10} {'this s':>8} {'ratio':>6}")
    for name, by_tree in times.items():
        base, this = statistics.median(by_tree["baseline"]), statistics.median(by_tree["this"])
        rows.append({"command": name, "baseline_s": round(base, 3), "this_s": round(this, 3),
                     "ratio": round(this / base, 3)})
        print(f"{name:<16} {base:>10.2f} {this:>8.2f} {this / base:>6.2f}")
    Path(options.json).write_text(json.dumps({"commit": _git_commit(), "baseline": options.baseline,
                                              "repeats": options.repeats, "file": options.file,
                                              "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
