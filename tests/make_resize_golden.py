"""Record what every resize method writes today, tensor by tensor, so that a
rewrite of the reading / writing path can be held to bitwise-identical outputs
(tests/test_resize_golden.py).

    .venv/bin/python tests/make_resize_golden.py         # rewrites tests/data/resize_golden.json
    .venv/bin/python tests/make_resize_golden.py --add   # adds the cases it lacks, keeps the others

Run it only when a change is *meant* to change what a method computes, and
say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import make_vit  # noqa: E402

import lgcli  # noqa: E402
from lgcli.resize import resize_file  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "resize_golden.json"

# (variant, timm overrides): 4 x 64 with 4 heads of 16, MLP 256, so depth and
# width both shrink and grow, by powers of two and by other ratios.
SOURCES = {
    "plain": ("cls-token", dict(depth=4, num_heads=4)),
    "layer-scale-qk-norm": ("layer-scale", dict(depth=4, num_heads=4, qk_norm=True)),
    "no-qkv-bias-registers": ("no-qkv-bias", dict(depth=4, num_heads=4, reg_tokens=2)),
    "distilled": ("distilled", dict(depth=4, num_heads=4)),
}
SHRINK = [(2, 32), (4, 32), (2, 64), (3, 48)]
GROW = [(6, 128), (8, 64), (4, 128), (5, 96)]
METHODS = {"shrink": ["bot", "select", "heur-lg", "auto-lg", "tleg-fit"],
           "grow": ["bot", "heur-lg", "auto-lg", "clone", "tleg-fit"]}
# Methods that change depth only, at the one size above that keeps the width (8 x 64), which each reaches.
DEPTH_ONLY = {"grow": ["depth-upscale", "identity-insert", "stack"]}
# The data-aware methods, calibrated on the embedded images, on the plain source.
CALIBRATED = {"shrink": ["block-influence", "angular", "block-ablation", "activation"]}
CALIBRATION = dict(calibrate="fashion-mnist-mini", calibrate_samples=8)
# Non-default options, on the plain source only.
EXTRA = [("shrink", (2, 32), "bot", dict(wavelet="db2", rescale="std")),
         ("shrink", (3, 48), "bot", dict(fit="crop", qkv_axis="flat")),
         ("grow", (8, 64), "clone", dict(insert="top")),
         ("grow", (5, 96), "bot", dict(wavelet="bior6.8", rescale="mean"))]


def tensor_digests(path: Path) -> dict[str, str]:
    out = {}
    with safe_open(str(path), "pt") as f:
        for key in sorted(f.keys()):
            t = f.get_tensor(key).contiguous()
            h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            out[key] = h.hexdigest()[:32]
    return out


def run_case(src: Path, out: Path, direction: str, size, method: str, options: dict) -> dict | str:
    depth, width = size
    try:
        resize_file(src, out, direction=direction, depth=depth, width=width, method=method, seed=3,
                    force=True, notify=lambda m: None, **options)
    except lgcli.errors.LgError as exc:
        # A refusal's runnable hint names the real paths: recorded as SRC and OUT.
        return f"refused: {exc}".replace(str(src), "SRC").replace(str(out), "OUT")
    return tensor_digests(out)


def sources(folder: Path) -> dict[str, Path]:
    paths = {}
    for name, (variant, overrides) in SOURCES.items():
        model = make_vit(variant, **overrides)
        paths[name] = folder / f"{name}.safetensors"
        lgcli.save_model(model, paths[name])
    bf16 = make_vit("cls-token", depth=4, num_heads=4).to(torch.bfloat16)
    paths["plain-bf16"] = folder / "plain-bf16.safetensors"
    lgcli.save_model(bf16, paths["plain-bf16"])
    return paths


def cases():
    for name in [*SOURCES, "plain-bf16"]:
        for direction, sizes in (("shrink", SHRINK), ("grow", GROW)):
            for size in sizes:
                depth_only = DEPTH_ONLY.get(direction, []) if size[1] == 64 else []
                for method in METHODS[direction] + depth_only:
                    yield name, direction, size, method, {}
    for direction, size, method, options in EXTRA:
        yield "plain", direction, size, method, options
    for direction, methods in CALIBRATED.items():
        for size in SHRINK:
            for method in methods:
                yield "plain", direction, size, method, CALIBRATION


def case_name(name, direction, size, method, options) -> str:
    extra = ",".join(f"{k}={v}" for k, v in sorted(options.items()))
    return f"{name} {direction} {size[0]}x{size[1]} {method}" + (f" {extra}" if extra else "")


def main() -> None:
    adding = "--add" in sys.argv[1:]
    golden = json.loads(GOLDEN.read_text()) if adding else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = sources(folder)
        for case in cases():
            name, direction, size, method, options = case
            if case_name(*case) in golden:
                continue
            golden[case_name(*case)] = run_case(paths[name], folder / "out.safetensors", direction, size,
                                                method, options)
        # A PEG learngene (training-free) grown without data.
        from lgcli.condense import CondenseSettings, condense_file

        learngene = folder / "peg.lg.safetensors"
        condense_file(paths["plain"], learngene, method="peg", settings=CondenseSettings(seed=1),
                      notify=lambda m: None)
        for size in [(6, 96), (2, 32)] if not adding else []:
            golden[f"peg {size[0]}x{size[1]}"] = run_case(learngene, folder / "out.safetensors", "grow", size,
                                                         None, {})
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    done = sum(isinstance(v, dict) for v in golden.values())
    print(f"{GOLDEN}: {len(golden)} cases, {done} written, {len(golden) - done} refused")


if __name__ == "__main__":
    main()
