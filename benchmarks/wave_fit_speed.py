"""How long does growing a WAVE learngene, scalers fitted, take on the CPU?

`lg grow` from a WAVE learngene initialises the scalers by Eq. B.1 for the
target size and, given data, fits them (and, by default, the globals) for
--steps steps with the templates frozen (`lgcli.learngenes.wave`). This
script times that end to end, as `lgcli.resize.expand` (load the data,
prepare, fit, materialise), for a 6 x 192 target at 28 px, and reports in
the same run, the cases interleaved (their order rotating) and repeated
--repeats times:

- wave fit: `expand(gene, depth=6, width=192, data="fashion-mnist-mini",
  steps=--steps)`, the kind's defaults otherwise (lr 1e-3, batch 32, globals
  fitted);
- wave fit, scalers only: the same with `fit_globals=False`;
- wave, no fit: the same with `steps=0` (prepare and materialise only: the
  fixed cost in the figures above);
- plain timm: --steps training steps of a timm 6 x 192 model
  (`lgcli.api.create_model`, seed 0) through `lgcli.train.train` with the
  fit's settings (WAVE's default batch, lr 1e-3, warm-up steps / 10, CE), data loading
  and model creation included.

For each: wall seconds (median over the repeats), seconds per step (wall /
--steps, fixed costs included), the mean loss over the first and last steps
(`report["details"]["loss_first"]` / `["loss_last"]`: up to 10 steps each)
and the number of trained scaler parameters. The learngene is made first by
a short condense of the example model (--condense-steps, template_dim 64 so
that width 192 = 3 x 64 is reachable); its quality does not matter here.
The issue's aim: the default fit (300 steps) in <= 60 s.

    .venv/bin/python benchmarks/wave_fit_speed.py [--steps 300] [--repeats 3] [--threads N]

--threads defaults to torch's own choice (what `lg grow` gets); on a machine
shared with another job, pin it (--threads 1): a smoke run here with torch's
2 threads against a busy neighbour was 5x slower per step than with 1. On a
shared 2-core machine at 1 thread a fitting step took ~0.75 s, so the full
run (3 cases x 300 steps x 3 repeats) takes about half an hour. Results: a
table on stdout and benchmarks/wave_fit_speed.json (--json to write
elsewhere). The fit prints its own progress line on stderr every 30 s when
stderr is not a terminal.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch


HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from lgcli.api import create_model  # noqa: E402
from lgcli.arch import get_adapter  # noqa: E402
from lgcli.condense import CondenseSettings, condense  # noqa: E402
from lgcli.data import load_data  # noqa: E402
from lgcli.resize import expand  # noqa: E402
from lgcli.sizing import target_spec  # noqa: E402
from lgcli.learngenes.wave import KIND as WAVE  # noqa: E402
from lgcli.options import defaults  # noqa: E402
from lgcli.losses import distillation_loss  # noqa: E402
from lgcli.train import TrainConfig, train  # noqa: E402

sys.path.insert(0, str(HERE))
from condense_speed import _git_commit  # noqa: E402  (one copy of the helper)

# The fit's batch: WAVE's declared default, so the plain case trains alike.
FIT_BATCH = defaults(WAVE.expand_options)["batch_size"]

EXAMPLE = REPO / "examples" / "fmnist_vit.safetensors"
DATA = "fashion-mnist-mini"


def _quiet(message: str) -> None:
    pass


def make_learngene(args):
    data = load_data(DATA, seed=0)
    started = time.perf_counter()
    gene, _, _ = condense(str(args.teacher), data, method="wave", options={"template_dim": args.template_dim},
                               settings=CondenseSettings(steps=args.condense_steps, batch_size=64, progress=False),
                               notify=_quiet)
    return gene, time.perf_counter() - started


def time_expand(gene, args, **options) -> dict:
    started = time.perf_counter()
    _, _, report = expand(gene, depth=args.depth, width=args.width, notify=_quiet, **options)
    seconds = time.perf_counter() - started
    details = report["details"]
    return {"seconds": seconds, "loss_first": details.get("loss_first"), "loss_last": details.get("loss_last"),
            "scaler_parameters": details.get("scaler_parameters"), "fitted": details.get("fitted")}


def time_plain(target, args) -> dict:
    started = time.perf_counter()
    data = load_data(DATA, seed=0)
    model = create_model(target, seed=0)
    # What WAVE's fit does (lgcli.learngenes.wave.Wave.fit, no teacher), on a timm model.
    config = TrainConfig(steps=args.steps, batch_size=FIT_BATCH, lr=1e-3, warmup_steps=args.steps // 10, seed=0,
                         progress=False)
    result = train(model, data.train, config, loss_fn=distillation_loss(0.0, 1.0))
    seconds = time.perf_counter() - started
    window = max(1, min(10, len(result.losses) // 5))
    return {"seconds": seconds, "loss_first": sum(result.losses[:window]) / window,
            "loss_last": sum(result.losses[-window:]) / window,
            "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, default=EXAMPLE, help="the model the learngene is condensed from")
    parser.add_argument("--template-dim", type=int, default=64)
    parser.add_argument("--condense-steps", type=int, default=20, help="the learngene's (untimed) condense")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--steps", type=int, default=defaults(WAVE.expand_options)["steps"],
                        help="fitting steps [default: WAVE's]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads [default: torch's]")
    parser.add_argument("--json", type=Path, default=HERE / "wave_fit_speed.json")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        parser.error("need --steps >= 1 and --repeats >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    gene, condense_seconds = make_learngene(args)
    target = target_spec(gene.spec, depth=args.depth, width=args.width)
    print(f"learngene: wave, template_dim {args.template_dim}, condensed {args.condense_steps} steps in "
          f"{condense_seconds:.1f} s", file=sys.stderr, flush=True)

    cases = {
        "wave fit": lambda: time_expand(gene, args, data=DATA, steps=args.steps),
        # The fit's defaults before issue 19, side by side with today's.
        "wave fit, 300 x 32 at 1e-3": lambda: time_expand(gene, args, data=DATA, steps=300, lr=1e-3, batch_size=32),
        "wave fit, scalers only": lambda: time_expand(gene, args, data=DATA, steps=args.steps, fit_globals=False),
        "wave, no fit": lambda: time_expand(gene, args, data=DATA, steps=0),
        "plain timm": lambda: time_plain(target, args),
    }
    names = list(cases)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            runs[name].append(cases[name]())
            print(f"repeat {repeat + 1}/{args.repeats} {name}: {runs[name][-1]['seconds']:.1f} s",
                  file=sys.stderr, flush=True)

    rows = []
    for name in names:
        seconds = _median(r["seconds"] for r in runs[name])
        fitted = name != "wave, no fit"
        steps = 300 if name.startswith("wave fit, 300") else args.steps
        rows.append({"case": name, "steps": steps if fitted else 0, "seconds": round(seconds, 2),
                     "seconds_per_step": round(seconds / steps, 4) if fitted else None,
                     "loss_first": _median(r.get("loss_first") for r in runs[name]),
                     "loss_last": _median(r.get("loss_last") for r in runs[name]),
                     "scaler_parameters": runs[name][0].get("scaler_parameters"),
                     "trained_parameters": runs[name][0].get("trained_parameters"),
                     "repeats_s": [round(r["seconds"], 2) for r in runs[name]]})

    print(f"target {target.depth} x {target.width} ({target.heads} heads, mlp {target.mlp_dim}), "
          f"{args.steps} steps of {FIT_BATCH}, {args.repeats} repeats, {torch.get_num_threads()} thread(s)")
    print(f"{'case':24} {'seconds':>8} {'s/step':>8} {'loss@start':>10} {'loss@end':>9} {'scalers':>8}")
    for r in rows:
        def num(value, width, fmt):
            return f"{value:>{width}{fmt}}" if value is not None else f"{'-':>{width}}"
        print(f"{r['case']:24} {num(r['seconds'], 8, '.2f')} {num(r['seconds_per_step'], 8, '.4f')} "
              f"{num(r['loss_first'], 10, '.4f')} {num(r['loss_last'], 9, '.4f')} "
              f"{num(r['scaler_parameters'], 8, 'd')}")
    print("aim: the default wave fit <= 60 s (issue 19)")

    result = {"target": {"depth": target.depth, "width": target.width, "heads": target.heads,
                         "mlp_dim": target.mlp_dim},
              "input_size": list(get_adapter(target.family).input_size(target)), "data": DATA, "batch_size": FIT_BATCH,
              "steps": args.steps, "repeats": args.repeats, "threads": torch.get_num_threads(),
              "learngene": {"kind": "wave", "template_dim": args.template_dim, "teacher": str(args.teacher),
                            "condense_steps": args.condense_steps, "condense_seconds": round(condense_seconds, 2)},
              "torch": torch.__version__, "machine": platform.platform(), "commit": _git_commit(),
              "aim_seconds_for_300_steps": 60, "cases": rows}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
