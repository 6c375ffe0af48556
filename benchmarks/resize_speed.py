"""How fast, and in how much memory, `lg` resizes a large checkpoint.

    .venv/bin/python benchmarks/resize_speed.py [--cases vitl,llama] [--folder /tmp/lg-bench] [--repeats 3]

Two random checkpoints, written once to --folder:

- ``vitl``: a ViT-L-shaped fp32 checkpoint (24 blocks x 1024, MLP 4096, 1.2 GB),
  one file;
- ``llama``: a ViT with Llama-7B's sizes (32 blocks x 4096, 32 heads, MLP
  11008) in bf16, 10 GB, written as Hugging Face shards of 5 GB. (lg reads no
  Llama checkpoint yet: the text families are their own issue. The shape, the
  dtype and the sharding are what this measures.)

Each is shrunk with BoT to half its depth and width and the result grown back,
each step by the real CLI (`python -m lgcli shrink|grow ... --method bot`) in
a fresh child process that records:

- wall time of the whole process less the fixed cost every torch program
  pays (`python -c "import torch"`, timed in the same run), as a ratio to
  `cp` of the same input and output files (page cache warm for both);
- peak RSS above the idle interpreter (torch and lgcli imported), as a ratio
  to the largest role stack the step makes in float32 (the transform's
  dtype), and as a fraction of the input's size.

On a shared 2-core machine single figures vary by +-20 %: the median of
--repeats is reported. Results are printed as JSON (and written with --out).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

CASES = {
    "vitl": dict(depth=24, width=1024, heads=16, mlp_dim=4096, dtype="float32", shard_size=0),
    "llama": dict(depth=32, width=4096, heads=32, mlp_dim=11008, dtype="bfloat16", shard_size=5_000_000_000),
}

# Runs one CLI command in this process after measuring the idle baseline.
CHILD = """
import json, sys, time
import torch
import lgcli.cli

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

baseline = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts from here
started = time.perf_counter()
try:
    lgcli.cli.main(sys.argv[1:])
except SystemExit as exc:
    if exc.code:
        raise
print(json.dumps({"command_s": time.perf_counter() - started, "baseline": baseline, "peak": status("VmHWM:")}))
"""


def make_checkpoint(path: Path, case: dict) -> None:
    """A random checkpoint of the case's shape, written layer by layer (the
    writer streams, so this never holds the model either)."""
    import timm
    import torch

    import lgcli
    from lgcli.stack import RoleMap, Stack

    template = timm.create_model("vit_base_patch16_224", depth=1, embed_dim=64, num_heads=1, num_classes=10,
                                 img_size=32)
    from lgcli.api import spec_of_model

    spec, small = spec_of_model(template)
    spec = spec.with_sizes(depth=case["depth"], width=case["width"], heads=case["heads"],
                           head_dim=case["width"] // case["heads"], mlp_dim=case["mlp_dim"])
    sizes = spec.axis_sizes()

    def lazy(roles):
        info = {role: (n.axes, tuple(sizes.get(a, s) for a, s in zip(n.axes, n.shape))) for role, n in roles.items()}

        def make(role):
            generator = torch.Generator().manual_seed(zlib.crc32(role.encode()))
            return torch.randn(info[role][1], generator=generator).mul_(0.02)

        return RoleMap(info, make)

    stack = Stack(layers=lazy(small.layers), globals=lazy(small.globals))
    dtype = getattr(torch, case["dtype"])
    lgcli.save(path, spec, stack, method="random", force=True, dtype=dtype, shard_size=case["shard_size"])


def largest_role_bytes(path: Path) -> int:
    import lgcli

    return lgcli.load(path).stack.largest_role_elements() * 4  # float32, the transform's dtype


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def copy_seconds(*paths: Path, scratch: Path) -> float:
    """cp of the step's input and output, as the shell does it (-r for a sharded folder)."""
    total = 0.0
    for path in paths:
        copy = scratch / ("copy-" + path.name)
        total += seconds(["cp", "-r", str(path), str(copy)])
        shutil.rmtree(copy) if copy.is_dir() else copy.unlink()
    return total


def run_step(direction: str, src: Path, dst: Path, depth: int, width: int, mlp_dim: int, shard_size: int) -> dict:
    command = [sys.executable, "-c", CHILD, direction, str(src), "--depth", str(depth), "--width", str(width),
               "--mlp-dim", str(mlp_dim), "--method", "bot", "--shard-size", str(shard_size or 0),
               "-o", str(dst)]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"{direction} failed: {proc.stderr.strip().splitlines()[-1]}")
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"process_s": wall, **measured}


def bench_case(name: str, case: dict, folder: Path, repeats: int) -> dict:
    source = folder / (f"{name}.safetensors" if not case["shard_size"] else name)
    if not source.exists():
        print(f"writing a random {name}-shaped checkpoint to {source} ...", file=sys.stderr)
        make_checkpoint(source, case)
    half = dict(depth=case["depth"] // 2, width=case["width"] // 2, mlp_dim=case["mlp_dim"] // 2)
    small = folder / f"{name}-half" if case["shard_size"] else folder / f"{name}-half.safetensors"
    regrown = folder / f"{name}-regrown" if case["shard_size"] else folder / f"{name}-regrown.safetensors"
    steps = [("shrink", source, small, half),
             ("grow", small, regrown, dict(depth=case["depth"], width=case["width"], mlp_dim=case["mlp_dim"]))]
    rows = []
    for direction, src, dst, size in steps:
        runs = []
        for _ in range(repeats):
            torch_s = seconds([sys.executable, "-c", "import torch"])
            # A new output, as cp's is: replacing an existing file by rename makes
            # ext4 flush it to disk first (auto_da_alloc), seconds for a GB.
            if dst.exists():
                shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
            measured = run_step(direction, src, dst, size["depth"], size["width"], size["mlp_dim"],
                                case["shard_size"])
            measured["torch_s"] = torch_s
            measured["cp_s"] = copy_seconds(src, dst, scratch=folder)
            runs.append(measured)
            print(f"{name} {direction}: {json.dumps({k: round(v, 3) for k, v in measured.items()})}",
                  file=sys.stderr)
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        role = max(largest_role_bytes(src), largest_role_bytes(dst))
        above = median["peak"] - median["baseline"]
        rows.append({
            "step": f"{direction} {src.name} -> {dst.name}",
            "input_bytes": size_of(src), "output_bytes": size_of(dst), "largest_role_bytes_fp32": role,
            "cp_s": round(median["cp_s"], 2),
            "import_torch_s": round(median["torch_s"], 2),
            "process_s": round(median["process_s"], 2),
            "process_less_torch_vs_cp": round((median["process_s"] - median["torch_s"]) / median["cp_s"], 2),
            "command_s": round(median["command_s"], 2),
            "peak_above_idle_bytes": above,
            "peak_above_idle_vs_largest_role": round(above / role, 2),
            "peak_above_idle_vs_input": round(above / size_of(src), 3),
        })
    return {"case": name, **case, "repeats": repeats, "steps": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="vitl,llama")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/lg-bench"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    results = {"machine": {"cpus": os.cpu_count(),
                           "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
               "cases": [bench_case(name, CASES[name], args.folder, args.repeats)
                         for name in args.cases.split(",")]}
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
