"""What the data-aware methods' calibration pass costs, against training
steps of the same model on the same machine, in one run (issue 28's aim: at
most the cost of 20 training steps).

For each case: the seconds of `lgcli.calibration.calibrate` on N examples
(the default 64, or the case's own), and the seconds of 20 steps of lg's
training loop (AdamW, the case's batch) on the same data; the ratio is the
calibration over the 20 steps. Each is the median of --repeats runs.

Block ablation (`--method block-ablation`) runs more passes after that one:
one per block skipped alone (one-shot, L + 1 passes with the full model's)
or, greedy, L + (L - 1) + ... + (D + 1) and two more a round to reach depth D (half the depth
here, SLEB's rounds); each is timed --ablation-repeats times (median) and
reported beside the calibration, with its ratio to the same 20 steps. The
blocks before the first skipped one replay the full pass, so a pass costs
less than a whole forward (`lgcli.calibration.Ablation`).

    OMP_NUM_THREADS=2 python benchmarks/calibration_cost.py            # the example ViT and Llama
    python benchmarks/calibration_cost.py --smollm2 ~/.cache/lg-real/smollm2-135m --kjv ~/.cache/lg-real/kjv/calibrate.txt
    python benchmarks/calibration_cost.py --only vit --dinov2 ~/.cache/lg-real/dinov2-s-fmnist
    python benchmarks/calibration_cost.py --only none --smollm2 ~/.cache/lg-real/smollm2-135m \
        --kjv ~/.cache/lg-real/kjv/calibrate.txt --smollm2-samples 8 --rules one-shot --repeats 1
    (the same with --rules greedy --target-depth 20: greedy to the 20 layers of BLOCK_ABLATION.md)

Results are appended to benchmarks/calibration_cost.json as they land.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_suffix(".json")


def measure(name: str, source: str, data: str, samples: int, seq_len: int | None, batch: int, repeats: int,
            device: str, ablation_repeats: int = 1, rules: tuple[str, ...] = ("one-shot", "greedy"),
            target_depth: int | None = None) -> dict:
    import torch

    from lgcli.api import load
    from lgcli.arch import get_adapter
    from lgcli.calibration import CALIBRATION_BATCH, calibrate, calibration_examples
    from lgcli.losses import cross_entropy_loss
    from lgcli.train import TrainConfig, train

    loaded = load(source)
    adapter = get_adapter(loaded.spec.family)
    model = adapter.load_model(loaded.spec, loaded.stack).float()
    examples, label = calibration_examples(model, loaded.spec, data, samples=samples, seed=0, seq_len=seq_len,
                                           companions=loaded.checkpoint.companions, where=source,
                                           notify=lambda m: None)
    calibration = []
    for _ in range(repeats):
        started = time.perf_counter()
        gathered = calibrate(model, loaded.spec, examples, name=label, seed=0, device=device)
        calibration.append(time.perf_counter() - started)
    from lgcli.methods.block_ablation import greedy, one_shot

    depth = gathered.ablation.depth
    kept = target_depth or depth // 2
    ablation = {rule: [] for rule in rules}
    passes, chosen = {}, {}
    for _ in range(ablation_repeats):
        for rule, choose in (("one-shot", one_shot), ("greedy", greedy)):
            if rule not in rules:
                continue
            gathered.ablation.passes = 0
            started = time.perf_counter()
            chosen[rule] = choose(gathered.ablation, kept)[0]
            ablation[rule].append(time.perf_counter() - started)
            passes[rule] = gathered.ablation.passes
    # 20 steps of the same model on the same examples (with their targets),
    # after one untimed step (the optimiser's first allocation).
    steps = []
    for _ in range(repeats):
        trained = adapter.load_model(loaded.spec, loaded.stack).float()
        config = TrainConfig(steps=21, batch_size=batch, lr=1e-4, seed=0, device=device, progress=False,
                             callback_every=1)
        marks = {}

        def on_step(step, _model):
            if step in (1, 21):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                marks[step] = time.perf_counter()

        train(trained, examples, config, loss_fn=cross_entropy_loss(), on_step=on_step)
        steps.append(marks[21] - marks[1])
    result = {"case": name, "examples": samples, "batch": batch, "device": device,
              "calibration_seconds": statistics.median(calibration), "twenty_steps_seconds": statistics.median(steps),
              "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
              "threads": torch.get_num_threads()}
    result["ratio"] = result["calibration_seconds"] / result["twenty_steps_seconds"]
    for rule, seconds in ablation.items():
        result[f"ablation_{rule}"] = {"depth": f"{depth} -> {kept}", "seconds": statistics.median(seconds),
                                      "passes_per_batch": passes[rule] // -(-samples // CALIBRATION_BATCH[examples.unit]),
                                      "kept_layers": chosen[rule],
                                      "ratio": (statistics.median(seconds) + result["calibration_seconds"])
                                      / result["twenty_steps_seconds"]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smollm2", help="a SmolLM2 folder (benchmarks/real/fetch.py)")
    parser.add_argument("--kjv", help="calibration text for SmolLM2")
    parser.add_argument("--dinov2", help="the real DINOv2-S classifier folder (benchmarks/real/fetch.py)")
    parser.add_argument("--only", choices=("vit", "llama", "none"), help="one of the two example cases, or neither")
    parser.add_argument("--ablation-repeats", type=int, default=1)
    parser.add_argument("--rules", default="one-shot,greedy", help="the block-ablation rules timed")
    parser.add_argument("--target-depth", type=int, help="the depth block ablation shrinks to [default: half]")
    parser.add_argument("--smollm2-samples", type=int, default=32, help="SmolLM2's calibration windows")
    args = parser.parse_args()
    cases = [("example ViT 6x128, 64 images", str(REPO / "examples/fmnist_vit.safetensors"), "fashion-mnist-mini",
              64, None, 64),
             ("example Llama 4x128, 64 windows of 128", str(REPO / "examples/kjv_llama"), "kjv-mini", 64, 128, 32)]
    if args.only:
        cases = [] if args.only == "none" else [cases[0 if args.only == "vit" else 1]]
    if args.dinov2:
        cases.append(("real DINOv2-S classifier 12x384, 64 images", args.dinov2, "fashion-mnist", 64, None, 64))
    if args.smollm2:
        cases.append((f"SmolLM2-135M, {args.smollm2_samples} windows of 128", args.smollm2, args.kjv or "kjv-mini",
                      args.smollm2_samples, 128, 4))
    for case in cases:
        result = measure(*case, repeats=args.repeats, device=args.device, ablation_repeats=args.ablation_repeats,
                         rules=tuple(args.rules.split(",")), target_depth=args.target_depth)
        print(json.dumps(result), flush=True)
        with RESULTS.open("a") as out:
            out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
