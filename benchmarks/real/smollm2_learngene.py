"""Learngenes of a real Llama at equal compute: SmolLM2-135M's learngene,
condensed for --steps steps and grown to 20 layers, against the best resize
(angular distance, calibrated) healed by `lg distill` for the same steps.

Every row runs lg's own command line, as a user would, and is appended to
--results as a JSON line the moment it lands; a rerun skips the rows already
there, so the study resumes. Perplexity is smollm2_study.py's: 8 x 256
tokens of test.txt (the original: 19.2).

Rows (N = --steps, every run 4 windows x 128 tokens of train.txt a step):

- `angular-d20+distillN`: `lg shrink --depth 20 --method angular
  --calibrate calibrate.txt`, then `lg distill` from the original for N
  (at `--distill-lr R`, `angular-d20+distillN-lrR`: condensing's rate;
  at `--distill-alpha A`, `...-alphaA`: condensing's mix of the next-token
  loss);
- `tleg-N`: `lg condense --method tleg` for N (its default depths, 2 to
  twice the teacher's), grown to 20 and to 30 layers;
- `tleg-depths20-N`: the same, trained at depth 20 alone (`--depths 20`),
  the learngene spending every step on the one size asked for;
- `sws-stages30-depths20-N`: SWS with a stage per layer (`--stages 30`:
  it starts from the teacher itself) trained at depth 20 alone;
- `sws-stages30-depths10-30-N`: the same trained at depths 10 to 30, a
  learngene for many sizes;
- `sws-depths20-N`: SWS with its default 5 stages (each the mean of six
  of the teacher's layers at the start) trained at depth 20;
- `sws-stages30-depths20-angular-N`, `sws-stages30-depths10-30-angular-N`:
  the stage-per-layer rows with `--stage-map angular`: each depth's
  descendant takes the teacher layers angular distance keeps on 64 windows
  of train.txt (condensing's own calibration), not evenly spaced ones;
- `angular-d20-train64`: where those start at 20 layers, no step: `lg
  shrink --method angular` calibrated as condensing calibrates (64 windows
  of 128 tokens of train.txt, seed 0), which is the descendant they start as.

`--seed S` seeds every run's data order (and a condense's draws); the
angular shrink, calibrated at lg's default seed, is the same model at every
seed. Rows of seed S > 0 end in `-seedS`.

    C=~/.cache/lg-real
    python benchmarks/real/smollm2_learngene.py --source $C/smollm2-135m --kjv $C/kjv --work /tmp/smol-lg \\
        --steps 100 --results benchmarks/real/smollm2_learngene.jsonl     # CPU: about an hour
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from smollm2_perplexity import ResultRows, load, machine, perplexity, token_windows  # noqa: E402

# Row name: (kind, its lg condense flags).
LEARNGENES = {"tleg": ("tleg", []), "tleg-depths20": ("tleg", ["--depths", "20"]),
              "sws-stages30-depths20": ("sws", ["--stages", "30", "--depths", "20"]),
              "sws-stages30-depths10-30": ("sws", ["--stages", "30", "--depths", "10-30"]),
              "sws-depths20": ("sws", ["--depths", "20"]),
              "sws-stages30-depths20-angular": ("sws", ["--stages", "30", "--depths", "20", "--stage-map", "angular"]),
              "sws-stages30-depths10-30-angular": ("sws", ["--stages", "30", "--depths", "10-30",
                                                           "--stage-map", "angular"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--kjv", required=True, type=Path, help="the folder fetch.py writes (calibrate/train/test.txt)")
    parser.add_argument("--work", required=True, type=Path, help="where the models and learngenes are written")
    parser.add_argument("--results", type=Path, default=HERE / "smollm2_learngene.jsonl")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=None, help="condense's rate [lg condense's default]")
    parser.add_argument("--distill-lr", type=float, default=None,
                        help="lg distill's rate [its default]; the healed row's name then ends in -lrR")
    parser.add_argument("--distill-alpha", type=float, default=None,
                        help="lg distill's --alpha [its default, 1]; the healed row's name then ends in -alphaA")
    parser.add_argument("--only", default="", help="comma-separated row names to run (default: all)")
    parser.add_argument("--device", default="cpu", help="lg's --device for every run (cuda on a lent GPU)")
    parser.add_argument("--seed", type=int, default=0, help="every run's --seed (rows of seed S > 0 end in -seedS)")
    args = parser.parse_args()

    import transformers

    on = "cuda" if args.device.startswith("cuda") else "cpu"  # where the perplexity is measured
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.source)
    windows = token_windows(tokenizer, (args.kjv / "test.txt").read_text()).to(on)
    args.work.mkdir(parents=True, exist_ok=True)
    train = str(args.kjv / "train.txt")
    # Both score 16 held-out windows (the figures here are smollm2_perplexity's), so their wall times are the runs'.
    text_flags = ["--batch-size", str(args.batch), "--seq-len", "128", "--device", args.device, "--test-subset", "16",
                  "--seed", str(args.seed)]
    seeded = f"-seed{args.seed}" if args.seed else ""

    rows = ResultRows(args.results, machine(on), args.only)
    land, wanted = rows.land, rows.wanted

    def lg(*command: str) -> tuple[dict, float]:
        """Run one lg command with --json; its report and wall seconds."""
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "lgcli", *command, "--json", "--force"], capture_output=True,
                                text=True)
        seconds = round(time.perf_counter() - started, 1)
        if result.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
        return json.loads(result.stdout), seconds

    def model_ppl(folder: Path) -> float:
        return round(perplexity(load(folder, on)[0], windows)[0], 2)

    if wanted("original"):
        land("original", perplexity=model_ppl(args.source))

    setting = (f"-lr{args.distill_lr:g}" if args.distill_lr else "") + (
        f"-alpha{args.distill_alpha:g}" if args.distill_alpha is not None else "")
    row = f"angular-d20+distill{args.steps}{setting}{seeded}"
    if wanted(row):
        shrunk, shrink_seconds = args.work / "angular-d20", None  # one shrink serves every seed's row
        if not shrunk.exists():
            _, shrink_seconds = lg("shrink", str(args.source), "--depth", "20", "--method", "angular",
                                   "--calibrate", str(args.kjv / "calibrate.txt"), "--calibrate-samples", "32",
                                   "--calibrate-seq-len", "128", "-o", str(shrunk))
        healed = args.work / row
        report, seconds = lg("distill", str(shrunk), "--teacher", str(args.source), "--data", train,
                             "--steps", str(args.steps), *text_flags,
                             *(["--lr", str(args.distill_lr)] if args.distill_lr else []),
                             *(["--alpha", str(args.distill_alpha)] if args.distill_alpha is not None else []),
                             "-o", str(healed))
        land(row, steps=args.steps, seed=args.seed, lr=report["options"]["lr"], shrink_seconds=shrink_seconds,
             train_seconds=seconds, perplexity_shrunk=model_ppl(shrunk), perplexity=model_ppl(healed))

    if wanted("angular-d20-train64"):
        start = args.work / "angular-d20-train64"
        _, seconds = lg("shrink", str(args.source), "--depth", "20", "--method", "angular", "--calibrate", train,
                        "--calibrate-samples", "64", "--calibrate-seq-len", "128", "-o", str(start))
        land("angular-d20-train64", shrink_seconds=seconds, perplexity=model_ppl(start))

    for name, (kind, flags) in LEARNGENES.items():
        row = f"{name}-{args.steps}{seeded}"
        if not wanted(row):
            continue
        learngene = args.work / f"{row}.lg.safetensors"
        report, seconds = lg("condense", str(args.source), "--method", kind, "--data", train,
                             "--steps", str(args.steps), *text_flags, *flags,
                             *(["--lr", str(args.lr)] if args.lr else []), "-o", str(learngene))
        grown = {}
        for depth in (20, 30):
            folder = args.work / f"{row}-depth{depth}"
            lg("grow", str(learngene), "--depth", str(depth), "-o", str(folder))
            grown[depth] = model_ppl(folder)
        land(row, steps=args.steps, seed=args.seed, lr=report["options"]["lr"], depths=report["options"]["depths"],
             train_seconds=seconds, loss_first=report["loss_first"], loss_last=report["loss_last"],
             perplexity=grown[20], perplexity_depth30=grown[30])


if __name__ == "__main__":
    main()
