"""Pre-train the example ancestry model `examples/fmnist_vit.safetensors`.

A ViT of 6 layers x 128 (2 heads of 64, MLP 512), patch 7 at 28 px (16
patches + a class token), one input channel, trained from timm's random
initialisation on the full Fashion-MNIST train split (60,000 images) with
`lgcli.train`, then stored in fp16 with lg's own writer (so it carries its
metadata) and scored on the official test split (10,000 images) from the
stored file.

    sudo apt-get install dataset-fashion-mnist
    OMP_NUM_THREADS=1 nice python examples/train_fmnist_vit.py --force   # ~22 min on one CPU core

The size is set by a budget of ~25 minutes of CPU: patch 7 rather than 4
(16 tokens instead of 49, a step ~3x cheaper), width 128 rather than 192
(half the cost per step), so that batch 64 fits 12,000 steps (12.8 epochs):
a 6 x 192 model given 3.8 epochs in the same time reached only 86.2 %.
One thread: on cores shared with other jobs, two PyTorch threads were several
times slower than one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import timm
import torch

from lgcli.data import load_data
from lgcli.accuracy import evaluate_accuracy
from lgcli.train import TrainConfig, train

HERE = Path(__file__).resolve().parent
ARCHITECTURE = dict(depth=6, embed_dim=128, num_heads=2, mlp_ratio=4.0, patch_size=7, img_size=28, in_chans=1,
                    num_classes=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--steps", type=int, default=12000)  # 12.8 epochs at batch 64
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--checkpoint", default=os.path.join(tempfile.gettempdir(), "lg-fmnist_vit.train.pt"))
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("-o", "--output", default=str(HERE / "fmnist_vit.safetensors"))
    args = parser.parse_args()

    data = load_data(args.data, seed=args.seed)
    torch.manual_seed(args.seed)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **ARCHITECTURE)
    config = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup,
                         weight_decay=0.05, label_smoothing=args.label_smoothing, seed=args.seed,
                         device=args.device, augment=True, checkpoint_path=args.checkpoint,
                         checkpoint_every=250, resume=args.resume, force=args.force,
                         description="pre-training fmnist_vit")
    started = time.time()
    train(model, data.train, config)
    minutes = (time.time() - started) / 60

    from lgcli.api import load_model, save_model

    options = {"data": args.data, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
               "warmup": args.warmup, "label_smoothing": args.label_smoothing, "seed": args.seed,
               "augment": "shift+flip", "script": "examples/train_fmnist_vit.py"}
    save_model(model.cpu(), args.output, method="pretrain", options=options, force=args.force or args.resume,
               dtype=torch.float16)
    # Score the stored fp16 file, not the fp32 weights in memory: that file is what users get.
    stored, _ = load_model(args.output)
    scores = evaluate_accuracy(stored, data.test, device=args.device)
    print(f"{args.output}: test top-1 {scores['top1']:.2f} %, top-5 {scores['top5']:.2f} %, "
          f"loss {scores['loss']:.4f} on {data.name} {data.test_split}; trained {minutes:.1f} min",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
