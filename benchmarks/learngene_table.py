"""The learngene table: learngenes condensed from the example model against
the training-free baselines, at several depths (and, for WAVE, widths).

For each depth: TLEG's descendant (the learngene's width), WAVE's descendants
at each `--wave-widths` (scalers fitted `--fit-steps` on the probe data), and
`heur-lg`, `auto-lg`, `select` (shrink only), `bot` from the example model at
the same size, plus timm's random init; each probed by `lg eval`'s protocol
(`lgcli.evaluate.evaluate`: same data order and settings for every row, the
best rate of `--lr-sweep`). Reports instinct (step-0 top-1) and final top-1,
and the condense cost. With `--steps 0` only the instinct is measured (fast).

    OMP_NUM_THREADS=2 nice .venv/bin/python benchmarks/learngene_table.py \\
        --condense-steps 600 --steps 300 --lr-sweep 3e-4,1e-3

Results: benchmarks/learngene_table.json and .md (the markdown table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from lgcli.api import save_learngene  # noqa: E402
from lgcli.condense import CondenseSettings, condense  # noqa: E402
from lgcli.data import load_data  # noqa: E402
from lgcli.evaluate import ProbeSettings, evaluate  # noqa: E402
from lgcli.resize import resize_file  # noqa: E402


def condensed(args, kind: str, options: dict, data, folder: Path) -> tuple[Path, dict]:
    path = folder / f"{kind}.lg.safetensors"
    report_path = folder / f"{kind}.condense.json"
    if path.exists() and report_path.exists() and not args.recondense:
        return path, json.loads(report_path.read_text())
    gene, checkpoint, report = condense(args.teacher, data, method=kind, options=options,
                                        settings=CondenseSettings(steps=args.condense_steps, batch_size=128,
                                                                  lr=args.condense_lr, seed=0))
    save_learngene(path, gene, options=report["options"], source=checkpoint, force=True)
    report_path.write_text(json.dumps(report, indent=1, default=str))
    return path, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default=str(REPO / "examples" / "fmnist_vit.safetensors"))
    parser.add_argument("--condense-data", default="fashion-mnist")
    parser.add_argument("--probe-data", default="fashion-mnist-mini")
    parser.add_argument("--condense-steps", type=int, default=600)
    parser.add_argument("--condense-lr", type=float, default=1e-3)
    parser.add_argument("--tleg-depths", default="2-12", help="TLEG --depths ('' for the paper's fixed depth)")
    parser.add_argument("--template-dim", type=int, default=64)
    parser.add_argument("--depths", default="2,4,6,9,12")
    parser.add_argument("--wave-widths", default="128,192")
    parser.add_argument("--fit-steps", type=int, default=300)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr-sweep", default="3e-4,1e-3")
    parser.add_argument("--test-subset", default=None)
    parser.add_argument("--methods", default="tleg,wave,heur-lg,auto-lg,select,bot")
    parser.add_argument("--work", default="/tmp/lg-learngene-table")
    parser.add_argument("--recondense", action="store_true")
    parser.add_argument("--out", default=str(HERE / "learngene_table"))
    args = parser.parse_args()

    folder = Path(args.work)
    folder.mkdir(parents=True, exist_ok=True)
    methods = args.methods.split(",")
    condense_data = load_data(args.condense_data, seed=0)
    probe_data = load_data(args.probe_data, seed=0, test_subset=args.test_subset)
    genes = {}
    if "tleg" in methods:
        genes["tleg"] = condensed(args, "tleg", {"depths": args.tleg_depths or None}, condense_data, folder)
    if "wave" in methods:
        genes["wave"] = condensed(args, "wave", {"template_dim": args.template_dim}, condense_data, folder)

    rates = [float(r) for r in args.lr_sweep.split(",")] if args.steps else []
    settings = ProbeSettings(steps=args.steps, lr_sweep=rates, progress=False)
    table = {"settings": vars(args), "condense": {k: {key: r[key] for key in ("steps", "seconds", "accuracy",
                                                                                 "teacher_accuracy")}
                                                    for k, (_, r) in genes.items()}, "rows": []}
    for depth in (int(d) for d in args.depths.split(",")):
        started = time.time()
        cells: list[tuple[str, Path]] = []
        if "tleg" in genes:
            out = folder / f"tleg-{depth}.safetensors"
            resize_file(genes["tleg"][0], out, direction="grow", depth=depth, force=True)
            cells.append(("tleg", out))
        if "wave" in genes:
            for wave_width in (int(w) for w in args.wave_widths.split(",")):
                out = folder / f"wave-{depth}x{wave_width}.safetensors"
                resize_file(genes["wave"][0], out, direction="grow", depth=depth, width=wave_width, force=True,
                            data=args.probe_data, steps=args.fit_steps)
                cells.append((f"wave {wave_width}", out))
        for method in ("heur-lg", "auto-lg", "select", "bot"):
            if method not in methods or (method == "select" and depth > 6):
                continue
            direction = "grow" if depth > 6 else "shrink"
            out = folder / f"{method}-{depth}.safetensors"
            resize_file(args.teacher, out, direction=direction, depth=depth, method=method, force=True)
            cells.append((method, out))
        report = evaluate([str(p) for _, p in cells], probe_data, settings, baseline="random",
                          notify=lambda m: None)
        names = [name for name, _ in cells] + ["random"] * (len(report["rows"]) - len(cells))
        for name, row in zip(names, report["rows"]):
            width_of = row["architecture"]["width"]
            table["rows"].append({"method": name, "depth": depth, "width": width_of,
                                  "instinct": row["instinct"]["top1"], "final": row["final"]["top1"],
                                  "lr": row["lr"]})
            print(f"depth {depth:2d} {name:10s} width {width_of:3d}: instinct {row['instinct']['top1']:5.1f} "
                  f"final {row['final']['top1']:5.1f}", file=sys.stderr, flush=True)
        print(f"depth {depth}: {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        Path(args.out + ".json").write_text(json.dumps(table, indent=1))

    lines = ["| method | " + " | ".join(f"{d} layers" for d in args.depths.split(",")) + " |",
             "|---|" + "---|" * len(args.depths.split(","))]
    order = []
    for row in table["rows"]:
        key = (row["method"], row["width"])
        if key not in order:
            order.append(key)
    for method, row_width in order:
        cells_text = []
        for depth in (int(d) for d in args.depths.split(",")):
            found = [r for r in table["rows"] if (r["method"], r["width"], r["depth"]) == (method, row_width, depth)]
            cells_text.append(f"{found[0]['instinct']:.1f} → {found[0]['final']:.1f}" if found and args.steps
                              else f"{found[0]['instinct']:.1f}" if found else "–")
        lines.append(f"| {method} ({row_width}) | " + " | ".join(cells_text) + " |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    torch.set_num_threads(2)
    sys.exit(main())
