"""How long `lg` takes to answer what needs no tensor: help, a usage error,
an error about a path, `lg inspect` of a safetensors file or folder.

    .venv/bin/python benchmarks/startup.py [--before DIR] [--repeats 5] [--out FILE]

Each case runs the real CLI (`python -m lgcli ...`, the interpreter of this
run) in a fresh process and takes the wall time of the whole process,
interpreter start included; the figure is the median of --repeats runs.
With --before (a checkout of an earlier lg, e.g. made with
`git worktree add /tmp/startup-base ff55abd`), every case is also run there,
alternating run by run with this checkout, so that both columns see the same
machine load, and the ratio before / after is printed beside them. Inputs are
this checkout's examples (the 2 MB Fashion-MNIST ViT file and the 3.4 MB
King James Llama folder), by absolute path, for both.

Results are printed as a table and as JSON (also written with --out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILE = ROOT / "examples" / "fmnist_vit.safetensors"
EXAMPLE_FOLDER = ROOT / "examples" / "kjv_llama"


def cases(scratch: Path) -> dict[str, list[str]]:
    """name -> lg's arguments. The outputs named are never written (each case
    stops before any work), in a scratch folder all the same."""
    out = str(scratch / "out.safetensors")
    return {
        "python -c pass (the interpreter alone)": [],
        "lg --help": ["--help"],
        "lg shrink --help": ["shrink", "--help"],
        "lg shrink --bogus (a mistyped option)": ["shrink", "--bogus"],
        "lg shrink missing.safetensors (a missing input)": ["shrink", "missing.safetensors", "--depth", "2", "-o", out],
        "lg eval FILE --data missing (a missing --data)": ["eval", str(EXAMPLE_FILE), "--data", "missing-data"],
        "lg inspect fmnist_vit.safetensors (2 MB file)": ["inspect", str(EXAMPLE_FILE)],
        "lg inspect kjv_llama (3.4 MB Hugging Face folder)": ["inspect", str(EXAMPLE_FOLDER)],
    }


def run_once(checkout: Path, args: list[str]) -> float:
    command = [sys.executable, "-c", "pass"] if not args else [sys.executable, "-m", "lgcli", *args]
    started = time.perf_counter()
    subprocess.run(command, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="a checkout of an earlier lg to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    options = parser.parse_args()
    checkouts = {"after": ROOT, **({"before": options.before.resolve()} if options.before else {})}
    with tempfile.TemporaryDirectory() as scratch:
        times: dict[str, dict[str, list[float]]] = {}
        for name, args in cases(Path(scratch)).items():
            times[name] = {label: [] for label in checkouts}
            for _ in range(options.repeats):
                for label, checkout in checkouts.items():  # alternating: both see the same load
                    times[name][label].append(run_once(checkout, args))
    medians = {name: {label: statistics.median(runs) for label, runs in by.items()} for name, by in times.items()}
    report = {"repeats": options.repeats, "python": sys.executable, "before": str(options.before or ""),
              "median_seconds": medians, "runs_seconds": times}
    width = max(map(len, medians))
    if options.before:
        print(f"{'case':<{width}}  before (s)  after (s)  before/after")
        for name, m in medians.items():
            print(f"{name:<{width}}  {m['before']:10.2f}  {m['after']:9.2f}  {m['before'] / m['after']:12.1f}")
    else:
        print(f"{'case':<{width}}  median (s)")
        for name, m in medians.items():
            print(f"{name:<{width}}  {m['after']:10.2f}")
    text = json.dumps(report, indent=2)
    if options.out:
        options.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
