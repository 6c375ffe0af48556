"""SmolLM2-135M shrunk by every lg method, then healed by `lg distill`
(issue 28's aims), on held-out King James text.

Rows, each appended to --results as a JSON line the moment it lands (a rerun
skips the rows already there, so the study resumes):

1. the original's perplexity (8 x 256 tokens of test.txt: smollm2_perplexity);
2. 30 -> 20 layers by select, heur-lg, tleg-fit, block-influence and angular
   (the data-aware ones calibrated on --calibrate-samples windows of 128
   tokens of calibrate.txt), and width 576 -> 384 (heads 9 -> 6, kv 3 -> 2,
   MLP 1536 -> 1024) by select and activation: perplexity, training-free;
3. each of those students distilled from the original with lg's
   `distill` for --steps steps of --batch windows of 128 tokens of train.txt,
   perplexity at every step in --report-at; the --long methods on to
   --long-steps.

Every shrink and distillation is lg's own library call (`resize_file`,
`distill`), as `lg shrink` and `lg distill` run them.

    C=~/.cache/lg-real
    python benchmarks/real/smollm2_study.py --source $C/smollm2-135m --kjv $C/kjv --work /tmp/smol \\
        --results benchmarks/real/smollm2_study.jsonl            # CPU: hours; GPU: minutes
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from smollm2_perplexity import ResultRows, perplexity, token_windows  # noqa: E402

DEPTH_METHODS = ("select", "heur-lg", "tleg-fit", "block-influence", "angular")
WIDTH_METHODS = ("select", "activation")
CALIBRATED = ("block-influence", "angular", "activation")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--kjv", required=True, type=Path, help="the folder fetch.py writes (calibrate/train/test.txt)")
    parser.add_argument("--work", required=True, type=Path, help="where the shrunk models are written")
    parser.add_argument("--results", type=Path, default=HERE / "smollm2_study.jsonl")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--calibrate-samples", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=None, help="distillation rate [lg distill's default]")
    parser.add_argument("--report-at", default="0,100,300")
    parser.add_argument("--long", default="block-influence,angular", help="depth methods distilled to --long-steps")
    parser.add_argument("--long-steps", type=int, default=0)
    parser.add_argument("--long-report-at", default="1000,3000")
    parser.add_argument("--only", default="", help="comma-separated row names to run (default: all)")
    args = parser.parse_args()

    import torch
    import transformers

    from lgcli.distill import DistillSettings, distill
    from lgcli.resize import resize_file
    from lgcli.devices import concrete_device

    device = concrete_device(args.device)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.source)
    windows = token_windows(tokenizer, (args.kjv / "test.txt").read_text()).to(device)
    machine = f"{platform.node()}, {torch.cuda.get_device_name() if device.startswith('cuda') else 'CPU'}, " \
              f"{torch.get_num_threads()} threads"

    rows = ResultRows(args.results, machine, args.only)
    land, wanted = rows.land, rows.wanted

    def model_ppl(folder: Path) -> float:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
        return perplexity(model, windows)[0]

    if wanted("original"):
        land("original", perplexity=model_ppl(args.source), layers=30, width=576)

    args.work.mkdir(parents=True, exist_ok=True)
    long_methods = args.long.split(",") if args.long_steps else []
    students = {}
    for kind, methods, sizes in (("d20", DEPTH_METHODS, dict(depth=20)),
                                 ("w384", WIDTH_METHODS, dict(width=384, kv_heads=2))):
        for method in methods:
            row = f"{method}-{kind}"
            folder = args.work / row
            students[row] = folder
            needed = [row, f"{row}+distill{args.steps}"] + \
                ([f"{row}+distill{args.long_steps}"] if kind == "d20" and method in long_methods else [])
            if not any(wanted(name) for name in needed):
                continue
            if not folder.exists():
                calibration = (dict(calibrate=str(args.kjv / "calibrate.txt"),
                                    calibrate_samples=args.calibrate_samples, calibrate_seq_len=128)
                               if method in CALIBRATED else {})
                started = time.perf_counter()
                report = resize_file(args.source, folder, direction="shrink", method=method, device=device,
                                     notify=lambda m: None, **sizes, **calibration)
                seconds = time.perf_counter() - started
            else:
                report, seconds = None, None
            if wanted(row):
                chosen = (report or {}).get("details", {})
                land(row, method=method, perplexity=model_ppl(folder), shrink_seconds=seconds,
                     kept_layers=chosen.get("kept_layers"), calibration_seconds=(report or {}).get("calibration_seconds"))

    def heal(row: str, steps: int, report_at: list[int]) -> None:
        name = f"{row}+distill{steps}"
        if not wanted(name):
            return
        curve = []

        def on_step(step, model):
            if step in report_at:
                was = model.training
                model.eval()
                curve.append({"step": step, "perplexity": perplexity(model, windows)[0]})
                model.train(was)
                print(json.dumps({"row": name, **curve[-1]}), flush=True)

        settings = DistillSettings(steps=steps, batch_size=args.batch, seed=0, device=device,
                                   **({"lr": args.lr} if args.lr else {}))
        started = time.perf_counter()
        _, report = distill(str(students[row]), str(args.source), str(args.kjv / "train.txt"), settings=settings,
                            seq_len=128, on_step=on_step, notify=lambda m: None)
        land(name, steps=steps, batch=f"{args.batch} x 128", lr=report["options"]["lr"], curve=curve,
             seconds=round(time.perf_counter() - started, 1), loss_first=report["loss_first"],
             loss_last=report["loss_last"])

    report_at = [int(s) for s in args.report_at.split(",")]
    for row in students:
        if students[row].exists():
            heal(row, args.steps, report_at)
    if args.long_steps:
        long_at = sorted({*report_at, *(int(s) for s in args.long_report_at.split(","))})
        for method in long_methods:
            if students[f"{method}-d20"].exists():
                heal(f"{method}-d20", args.long_steps, long_at)


if __name__ == "__main__":
    main()
