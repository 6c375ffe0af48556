"""What each 12 -> 6 choice on the real DINOv2-S classifier costs on the calibration examples themselves:
the objective block ablation minimises (the mean KL of the full model's class distribution to the
shrunk one's), and beside it the top-1 agreement with the full model, the top-1 on the labels, and
1 - cos of the final hidden states (what a new head would read). Each choice is the blocks a method kept
in benchmarks/real/block_ablation_dinov2.jsonl, skipped in place (`lgcli.calibration.Ablation`'s hook) on
the 64 images `lg shrink --calibrate fashion-mnist --calibrate-samples 64` draws (seed 0).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/real/block_ablation_dinov2_sets.py

Writes benchmarks/real/block_ablation_dinov2_sets.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("LG_REAL_CACHE", "~/.cache/lg-real")).expanduser()


def main() -> None:
    import torch

    from lgcli.api import load
    from lgcli.arch import get_adapter
    from lgcli.calibration import _skip_block, calibration_examples

    source = str(CACHE / "dinov2-s-fmnist")
    loaded = load(source)
    adapter = get_adapter(loaded.spec.family)
    model = adapter.load_model(loaded.spec, loaded.stack).float().eval()
    examples, _ = calibration_examples(model, loaded.spec, "fashion-mnist", samples=64, seed=0, seq_len=None,
                                       companions=loaded.checkpoint.companions, where=source)
    inputs, labels = examples.batch(range(len(examples)))
    named = dict(model.named_modules())
    blocks = [named[name] for name in adapter.layer_modules(loaded.spec, model)["block"]]

    def run(skipped):
        hooks = [blocks[b].register_forward_hook(_skip_block, with_kwargs=True) for b in skipped]
        try:
            with torch.inference_mode():
                return model(inputs).logits.float(), model.dinov2(inputs).last_hidden_state.float()
        finally:
            for hook in hooks:
                hook.remove()

    full_logits, full_features = run([])
    rows = {}
    for line in (HERE / "block_ablation_dinov2.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "kept_layers" not in record:
            continue
        skipped = sorted(set(range(12)) - set(record["kept_layers"]))
        logits, features = run(skipped)
        log_p, log_q = torch.log_softmax(full_logits, -1), torch.log_softmax(logits, -1)
        rows[record["row"]] = {
            "kept_layers": record["kept_layers"],
            "kl_to_full": round(float((log_p.exp() * (log_p - log_q)).sum(-1).mean()), 4),
            "top1_agreement": round(float((logits.argmax(-1) == full_logits.argmax(-1)).float().mean()) * 100, 2),
            "top1_labels": round(float((logits.argmax(-1) == labels).float().mean()) * 100, 2),
            "features_1_minus_cos": round(float((1 - torch.nn.functional.cosine_similarity(
                features, full_features, dim=-1)).mean()), 4),
            "step0_top1_test_2000": record["top1"]}
        print(record["row"], rows[record["row"]], flush=True)
    (HERE / "block_ablation_dinov2_sets.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
