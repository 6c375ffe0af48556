"""How fast, and in how much memory, BoT resizes a ViT-L-shaped checkpoint.

    .venv/bin/python benchmarks/resize_speed.py [--folder /tmp/lg-bench] [--repeats 3]

A random fp32 checkpoint of ViT-L's shape (24 blocks x 1024, MLP 4096, ~1.2 GB)
is shrunk with BoT to 12 x 512 and grown back to 24 x 1024. Each step runs in
a fresh child process (so its peak RSS is its own) and reports:

- wall time of `resize_file` (load + transform + save, no interpreter start)
  as a ratio to `cp` of the same input and output files, measured in the same
  run (page cache warm for both);
- the transform alone (`resize`, file already loaded), as a ratio to the same cp;
- peak RSS as a ratio to the checkpoint's size, and the same after subtracting
  the process's RSS once torch and lgcli are imported.

Figures are ratios measured side by side; on a shared 2-core machine they
vary by +-30 % from run to run, so take the median of --repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = dict(depth=24, width=1024, heads=16, mlp_dim=4096)
SMALL = dict(depth=12, width=512)


def make_checkpoint(path: Path) -> int:
    """A random ViT-L-shaped fp32 checkpoint (timm layout, lg metadata)."""
    import timm
    import torch

    import lgcli
    from lgcli.stack import Named, Stack

    template = timm.create_model("vit_base_patch16_224", depth=1, embed_dim=64, num_heads=1,
                                 num_classes=1000)
    spec, small = lgcli.api.spec_of_model(template)
    spec = spec.with_sizes(depth=SIZES["depth"], width=SIZES["width"], heads=SIZES["heads"],
                           head_dim=SIZES["width"] // SIZES["heads"], mlp_dim=SIZES["mlp_dim"])
    sizes = spec.axis_sizes()
    generator = torch.Generator().manual_seed(0)

    def random_like(named: Named) -> Named:
        shape = [sizes.get(axis, n) for axis, n in zip(named.axes, named.shape)]
        return Named(torch.randn(shape, generator=generator) * 0.02, named.axes)

    stack = Stack(layers={r: random_like(n) for r, n in small.layers.items()},
                  globals={r: random_like(n) for r, n in small.globals.items()})
    lgcli.save(path, spec, stack, method="random", force=True)
    return path.stat().st_size


def child(direction: str, src: str, dst: str) -> None:
    """One resize in this process; prints timings and peak RSS as JSON."""
    import torch  # noqa: F401  (imported before the baseline RSS is taken)

    import lgcli
    from lgcli.resize import resize, resize_file

    baseline = _rss_bytes()
    sizes = SMALL if direction == "shrink" else dict(depth=SIZES["depth"], width=SIZES["width"])
    started = time.perf_counter()
    resize_file(src, dst, direction=direction, force=True, method="bot", **sizes)
    end_to_end = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    loaded = lgcli.load(src)
    started = time.perf_counter()
    resize(loaded, direction=direction, method="bot", **sizes)
    transform = time.perf_counter() - started
    print(json.dumps({"end_to_end_s": end_to_end, "transform_s": transform,
                      "peak_rss": peak, "baseline_rss": baseline}))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def copy_seconds(*paths: Path, scratch: Path) -> float:
    started = time.perf_counter()
    for path in paths:
        subprocess.run(["cp", str(path), str(scratch / ("copy-" + path.name))], check=True)
    elapsed = time.perf_counter() - started
    for path in paths:
        (scratch / ("copy-" + path.name)).unlink()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/lg-bench"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("DIRECTION", "SRC", "DST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    folder = args.folder
    folder.mkdir(parents=True, exist_ok=True)
    large, small, regrown = folder / "vitl.safetensors", folder / "small.safetensors", folder / "regrown.safetensors"
    if not large.exists():
        print("writing a random ViT-L-shaped checkpoint ...", file=sys.stderr)
        make_checkpoint(large)
    size = large.stat().st_size
    steps = {"shrink 24x1024 -> 12x512": ("shrink", large, small),
             "grow 12x512 -> 24x1024": ("grow", small, regrown)}
    rows = []
    for name, (direction, src, dst) in steps.items():
        runs = []
        for _ in range(args.repeats):
            proc = subprocess.run([sys.executable, __file__, "--child", direction, str(src), str(dst)],
                                  capture_output=True, text=True, check=True)
            measured = json.loads(proc.stdout.strip().splitlines()[-1])
            measured["cp_s"] = copy_seconds(src, dst, scratch=folder)
            runs.append(measured)
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        rows.append({
            "step": name,
            "cp_s": round(median["cp_s"], 3),
            "end_to_end_s": round(median["end_to_end_s"], 3),
            "end_to_end_vs_cp": round(median["end_to_end_s"] / median["cp_s"], 2),
            "transform_s": round(median["transform_s"], 3),
            "transform_vs_cp": round(median["transform_s"] / median["cp_s"], 2),
            "peak_rss_vs_checkpoint": round(median["peak_rss"] / size, 2),
            "peak_rss_above_imports_vs_checkpoint": round((median["peak_rss"] - median["baseline_rss"]) / size, 2),
        })
    print(json.dumps({"checkpoint_bytes": size, "repeats": args.repeats, "steps": rows}, indent=2))
    if os.environ.get("LG_BENCH_CLEAN"):
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
