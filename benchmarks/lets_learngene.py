"""LeTs on the example ancestry, in the protocol of benchmarks/width_learngenes.py
(issue 30 item 2): one LeTs learngene condensed from the ancestry with
`--widths 64,128 --depths 2-12` (a compact learngene of 3 layers at width 64
and its learned maps) for the same 1,500 steps as the width-trained TLEG
learngene, then its descendants at sizes of that grid, each scored by the
same probe (`lg eval`, 300 steps at batch 64, the best of three rates, 2,000
test images). Figures beside it: benchmarks/width_learngenes.md (same
protocol, same seed 0).

Each job's result is written as JSON when it finishes (``lets_learngene/``);
a rerun skips what is done.

    OMP_NUM_THREADS=1 nice python benchmarks/lets_learngene.py --sizes 3x64,3x128,6x64,8x128,12x128 --seed 0 \
        --variant lets-widths-fit     # or lets-widths: the reference's start of the width maps

writes lets_learngene.md (this learngene's rows beside the width study's of
the same seed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lets_learngene"

# The width-trained study's protocol (its constants, not its results folder).
_spec = importlib.util.spec_from_file_location("width_learngenes", HERE / "width_learngenes.py")
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)

CONDENSE = ["--method", "lets", "--widths", "64,128", "--depths", "2-12", "--init", "ancestry",
            "--steps", str(study.STEPS), "--data", study.DATA]
# The width maps' start: the reference's uniform rows (the rows "lets-widths" were run before the flag
# existed, when it was the only start), and the least-squares fit to the teacher (the default from it).
VARIANTS = {"lets-widths": ["--width-maps", "rand"], "lets-widths-fit": ["--width-maps", "fit"]}


def run(sizes: list[tuple[int, int]], seed: int, variant: str) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    study.CACHE.mkdir(parents=True, exist_ok=True)
    gene = study.CACHE / f"{variant}-s{seed}.lg.safetensors"
    results = {}
    target = OUT / f"condense-{variant}-s{seed}.json"
    if not target.exists() or not gene.exists():
        started = time.perf_counter()
        args = ["condense", study.EXAMPLE, *CONDENSE, *VARIANTS[variant], "--seed", str(seed), "-o", gene,
                "--force", "--json"]
        report = json.loads(study.lg(*args).stdout)
        target.write_text(json.dumps({"command": " ".join(map(str, ["lg", *args])),
                                      "seconds": round(time.perf_counter() - started, 1),
                                      "accuracy": report.get("accuracy"), "sha256": report.get("sha256")},
                                     indent=1) + "\n")
    results["condense"] = json.loads(target.read_text())
    for depth, width in sizes:
        name = f"probe-{variant}@{depth}x{width}-s{seed}"
        target = OUT / f"{name}.json"
        if not target.exists():
            print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
            started = time.perf_counter()
            path = study.CACHE / f"{name}.safetensors"
            build = ["grow", gene, "--depth", depth, "--width", width, "-o", path, "--force"]
            study.lg(*build)
            args = ["eval", path, *study.PROBE, "--seed", str(seed), "--json"]
            row = json.loads(study.lg(*args).stdout)["rows"][0]
            path.unlink()
            target.write_text(json.dumps({"build": " ".join(map(str, ["lg", *build])),
                                          "eval": " ".join(map(str, ["lg", *args])),
                                          "seconds": round(time.perf_counter() - started, 1),
                                          "final": row["final"]["top1"], "instinct": row["instinct"]["top1"],
                                          "lr": row.get("lr")}, indent=1) + "\n")
        results[f"{depth}x{width}"] = json.loads(target.read_text())
    return results


def report(seed: int) -> str:
    """lets_learngene.md: the LeTs learngene's rows beside the width study's
    rows of the same seed (its results as committed, read only)."""
    ours = {p.stem: json.loads(p.read_text()) for p in OUT.glob("*.json")}
    theirs = {p.stem: json.loads(p.read_text()) for p in (study.OUT / "results").glob("*.json")}

    def cell(results: dict, prefix: str, size: tuple[int, int]) -> str:
        found = results.get(f"{prefix}@{size[0]}x{size[1]}-s{seed}")
        return "…" if found is None else f"{found['final']:.2f} ({found['instinct']:.1f})"

    rows = [("best training-free", theirs, None), ("tleg --widths 64,128 (1,500 steps)", theirs, "probe-tleg-widths"),
            ("tleg, one width (1,500 steps; width 64 via --method bot)", theirs, "probe-tleg"),
            ("**lets --widths 64,128 --depths 2-12 --width-maps rand (1,500 steps)**", ours, "probe-lets-widths"),
            ("**lets --widths 64,128 --depths 2-12 --width-maps fit (1,500 steps)**", ours, "probe-lets-widths-fit")]
    lines = ["| row | " + " | ".join(f"{d} x {w}" for d, w in study.SIZES) + " |", "|---" * (len(study.SIZES) + 1) + "|"]
    for label, results, prefix in rows:
        cells = [(f"{study.BEST_FREE[size][0]} " if prefix is None else "")
                 + cell(results, prefix or f"probe-{study.BEST_FREE[size][0]}", size) for size in study.SIZES]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    condensed = {name: r for name, r in {**theirs, **ours}.items() if name.startswith("condense-")
                 and name.endswith(f"-s{seed}")}
    seconds = "; ".join(f"{name[9:]} {r['seconds']:.0f} s (auxiliary model {r['accuracy']['top1']:.1f} %)"
                        for name, r in sorted(condensed.items()))
    commands = "; ".join(f"`{r['command']}`" for name, r in sorted(ours.items())
                         if name.startswith("condense-") and name.endswith(f"-s{seed}"))
    text = "\n".join(lines) + (
        f"\n\nSeed {seed}, one seed per row. Final top-1 % after the probe (300 steps, best of rates 1e-4, 3e-4, "
        f"1e-3), (instinct at step 0); full Fashion-MNIST, 2,000 test images; the other rows are "
        f"benchmarks/width_learngenes/results. Condense wall times (2 busy CPU cores): {seconds}.\n\n"
        f"LeTs condensed with: {commands} (paths as run; the rand row's run predates --width-maps, rand was then "
        f"the only start); each descendant: `lg grow GENE --depth D --width W`, "
        f"then the probe. Rerun: `OMP_NUM_THREADS=1 nice python benchmarks/lets_learngene.py --sizes "
        f"3x64,3x128,6x64,8x128,12x128 --seed {seed} --variant lets-widths|lets-widths-fit`.\n")
    (HERE / "lets_learngene.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="3x64,3x128,6x64,8x128,12x128")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", choices=list(VARIANTS), default="lets-widths-fit")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
    run(sizes, args.seed, args.variant)
    print(report(args.seed))


if __name__ == "__main__":
    main()
