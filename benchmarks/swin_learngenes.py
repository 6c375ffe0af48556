"""Learngenes of a Swin on real data: every method and learngene kind lg has
for a Swin, side by side, by `lg bench` (issue 21, item 2).

An ancestry Swin (2 stages: depths 2, 4; widths 32, 64; heads 2, 4; patch 4
at 32 px, window 4) is trained here on Fashion-MNIST with `lgcli.train` (no
pretrained Swin can be downloaded), then `lg bench` grows and shrinks it to
a shallower, a deeper and a narrower Swin with each resize method and the
TLEG and PEG learngenes (WAVE is not defined on a Swin), and probes each
descendant with the bench's own training run.

    OMP_NUM_THREADS=1 nice python benchmarks/swin_learngenes.py            # ~30 min on 2 busy cores

Results: benchmarks/swin_learngenes/ (the ancestry's score, bench.json,
bench.md and the figures), summarised in docs/learngenes.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ARCHITECTURE = dict(embed_dim=32, depths=(2, 4), num_heads=(2, 4), img_size=32, patch_size=4, window_size=4,
                    in_chans=1, num_classes=10)
# The deepest stage's depth x the first stage's width (docs/methods.md "Models of stages").
SIZES = "2x32,6x32,4x16"


def train_ancestry(path: Path, steps: int, seed: int) -> dict:
    import timm
    import torch

    sys.path.insert(0, str(REPO))
    from lgcli.api import load_model, save_model
    from lgcli.data import load_data
    from lgcli.accuracy import evaluate_accuracy
    from lgcli.train import TrainConfig, train

    data = load_data("fashion-mnist", seed=seed)
    torch.manual_seed(seed)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **ARCHITECTURE)
    config = TrainConfig(steps=steps, batch_size=64, lr=1e-3, warmup_steps=steps // 20, weight_decay=0.05,
                         label_smoothing=0.1, seed=seed, augment=True, description="pre-training the Swin ancestry")
    started = time.time()
    train(model, data.train, config)
    seconds = time.time() - started
    save_model(model.cpu(), path, method="pretrain", force=True,
               options={"data": "fashion-mnist", "steps": steps, "batch_size": 64, "lr": 1e-3, "seed": seed,
                        "script": "benchmarks/swin_learngenes.py"})
    stored, _ = load_model(path)
    scores = evaluate_accuracy(stored, data.test)
    return {"steps": steps, "seconds": round(seconds, 1), "test_top1": round(scores["top1"], 2),
            "parameters": sum(p.numel() for p in model.parameters())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="the ancestry's training steps (batch 64)")
    parser.add_argument("--probe-steps", type=int, default=300)
    parser.add_argument("--condense-steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "swin_learngenes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ancestry = args.out / "swin_ancestry.safetensors"
    record = args.out / "ancestry.json"
    if not record.exists():
        record.write_text(json.dumps(train_ancestry(ancestry, args.steps, args.seed), indent=2) + "\n")
    print(record.read_text(), file=sys.stderr)
    command = [sys.executable, "-m", "lgcli", "bench", str(ancestry), "--data", "fashion-mnist",
               "--sizes", SIZES, "--steps", str(args.probe_steps), "--test-subset", "2000",
               "--condense-steps", str(args.condense_steps), "--seed", str(args.seed),
               "-o", str(args.out / "bench"), "--force", "--markdown"]
    print("$ " + " ".join(command[1:]), file=sys.stderr)
    result = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    (args.out / "bench.md").write_text(result.stdout)
    print(result.stdout)
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
