"""How much slower is a step of `lg condense` than a plain training step?

`lg condense` trains a learngene's tensors through `GeneratedModel`: on every
step the auxiliary model's weights are rebuilt from the learngene (TLEG Eq. 1,
WAVE Eq. 4) and timm's forward runs on them via `torch.func.functional_call`.
This script measures, side by side in one run, the step time of

- plain: a timm model of the auxiliary architecture (`lgcli.api.create_model`)
  trained on its own parameters;
- tleg, wave: the model `lgcli.condense.condense` builds for that kind
  (`kind.initial` on the family's random init, wrapped in `GeneratedModel`),
  with the kind's default condense options;

all through `lgcli.train.train` with the same `TrainConfig` (batch size, lr),
the same data (fashion-mnist-mini, seed 0), the same frozen teacher (the
example model, its forward on every step) and the same loss
(`distillation_loss(--alpha, --tau)`). Each case runs --warmup-steps untimed,
then --steps timed: a timestamp is taken after every step (`on_step` with
`callback_every=1`) and the case's figure is the median step time. The cases
are interleaved (their order rotating) and repeated --repeats times, so that
machine noise hits them alike; the report is each case's median over the
repeats and the ratio learngene / plain (the issue's goal: <= 1.15).

    .venv/bin/python benchmarks/condense_speed.py [--steps 40] [--repeats 3] [--threads 1]

At 1 thread on a shared 2-core machine a step of the 6 x 128 example at batch
128 took ~0.9 s, so the full run (3 cases x 45 steps x 3 repeats) takes
about 6 minutes. Results: a table on stdout and benchmarks/condense_speed.json (--json to
write elsewhere).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import lgcli  # noqa: E402
from lgcli.api import create_model, load_model  # noqa: E402
from lgcli.arch import get_adapter  # noqa: E402
from lgcli.data import load_data  # noqa: E402
from lgcli.learngenes import GeneratedModel, get_kind  # noqa: E402
from lgcli.options import resolve_options  # noqa: E402
from lgcli.sizing import target_spec  # noqa: E402
from lgcli.losses import distillation_loss  # noqa: E402
from lgcli.train import TrainConfig, train  # noqa: E402

EXAMPLE = REPO / "examples" / "fmnist_vit.safetensors"
KINDS = ("tleg", "wave")


def plain_model(aux) -> torch.nn.Module:
    """The auxiliary architecture as a stock timm model, the family's random init."""
    return create_model(aux, seed=0)


def learngene_model(aux, name: str) -> torch.nn.Module:
    """The model `lgcli.condense.condense` trains for kind `name` (default options)."""
    kind = get_kind(name)
    options = resolve_options(name, kind.condense_options, {})
    adapter = get_adapter(aux.family)
    aux_init = adapter.random_stack(aux, seed=0)
    trainable, frozen = kind.initial(aux, aux_init, options, torch.Generator().manual_seed(0))
    return GeneratedModel(aux, kind.build, trainable, frozen, kind.no_weight_decay,
                          depths=kind.training_depths(aux, options))


def step_times(model: torch.nn.Module, data, teacher: torch.nn.Module, args) -> list[float]:
    """Seconds of each of the --steps timed steps (after --warmup-steps untimed)."""
    stamps: dict[int, float] = {}

    def on_step(step: int, _model: torch.nn.Module) -> None:
        stamps[step] = time.perf_counter()

    config = TrainConfig(steps=args.warmup_steps + args.steps, batch_size=args.batch_size, lr=args.lr,
                         device=args.device, progress=False, callback_every=1)
    train(model, data.train, config, loss_fn=distillation_loss(args.alpha, args.tau), teacher=teacher,
          on_step=on_step)
    first = args.warmup_steps
    return [stamps[k] - stamps[k - 1] for k in range(first + 1, first + args.steps + 1)]


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default=str(EXAMPLE))
    parser.add_argument("--aux-depth", type=int, help="auxiliary depth [default: the teacher's]")
    parser.add_argument("--aux-width", type=int, help="auxiliary width [default: the teacher's]")
    parser.add_argument("--kinds", default=",".join(KINDS), help="learngene kinds to time, comma-separated")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per case and repeat")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before them")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128, help="as `lg condense`'s default")
    parser.add_argument("--lr", type=float, default=1e-3, help="as `lg condense`'s default")
    parser.add_argument("--alpha", type=float, default=0.5, help="distillation_loss(alpha, tau), every case")
    parser.add_argument("--tau", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=HERE / "condense_speed.json")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup_steps < 0 or args.repeats < 1:
        parser.error("need --steps >= 1, --warmup-steps >= 0, --repeats >= 1")

    torch.set_num_threads(args.threads)
    data = load_data("fashion-mnist-mini", seed=0)
    teacher = load_model(args.teacher)[0]
    spec = lgcli.load(args.teacher).spec
    aux = target_spec(spec, depth=args.aux_depth, width=args.aux_width)

    builders = {"plain": plain_model}
    for name in (k for k in args.kinds.split(",") if k):
        builders[name] = lambda aux, name=name: learngene_model(aux, name)
    cases = list(builders)
    parameters = {case: sum(p.numel() for p in builders[case](aux).parameters() if p.requires_grad)
                  for case in cases}

    runs: dict[str, list[dict]] = {case: [] for case in cases}
    for repeat in range(args.repeats):
        order = cases[repeat % len(cases):] + cases[:repeat % len(cases)]
        for case in order:
            model = builders[case](aux)
            times = step_times(model, data, teacher, args)
            runs[case].append({"median_s": statistics.median(times), "mean_s": statistics.fmean(times),
                               "min_s": min(times)})
            print(f"repeat {repeat + 1}/{args.repeats} {case}: {1000 * runs[case][-1]['median_s']:.1f} ms/step",
                  file=sys.stderr, flush=True)

    plain = statistics.median(r["median_s"] for r in runs["plain"])
    rows = []
    for case in cases:
        median = statistics.median(r["median_s"] for r in runs[case])
        # The ratio within each repeat, then its median: a second view, less
        # sensitive to drift between repeats.
        paired = statistics.median(r["median_s"] / p["median_s"] for r, p in zip(runs[case], runs["plain"]))
        rows.append({"case": case, "trained_parameters": parameters[case],
                     "step_ms": round(1000 * median, 2),
                     "step_ms_min": round(1000 * min(r["min_s"] for r in runs[case]), 2),
                     "vs_plain": round(median / plain, 3), "vs_plain_paired": round(paired, 3),
                     "repeats_ms": [round(1000 * r["median_s"], 2) for r in runs[case]]})

    print(f"auxiliary {aux.depth} x {aux.width} ({aux.heads} heads, mlp {aux.mlp_dim}), batch {args.batch_size}, "
          f"{args.steps} steps after {args.warmup_steps}, {args.repeats} repeats, {args.threads} thread(s), "
          f"{args.device}")
    print(f"{'case':8} {'params':>9} {'ms/step':>9} {'min':>9} {'vs plain':>9} {'paired':>8}")
    for r in rows:
        print(f"{r['case']:8} {r['trained_parameters']:>9} {r['step_ms']:>9.2f} {r['step_ms_min']:>9.2f} "
              f"{r['vs_plain']:>9.3f} {r['vs_plain_paired']:>8.3f}")
    print("goal: learngene / plain <= 1.15")

    result = {"auxiliary": {"depth": aux.depth, "width": aux.width, "heads": aux.heads, "mlp_dim": aux.mlp_dim},
              "teacher": str(args.teacher), "data": "fashion-mnist-mini", "batch_size": args.batch_size,
              "lr": args.lr, "alpha": args.alpha, "tau": args.tau, "steps": args.steps,
              "warmup_steps": args.warmup_steps, "repeats": args.repeats, "threads": args.threads,
              "device": args.device, "torch": torch.__version__, "machine": platform.platform(),
              "commit": _git_commit(), "goal_vs_plain": 1.15, "cases": rows}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
