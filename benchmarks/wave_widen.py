"""How should a WAVE learngene's globals reach a new width: interleave or tile?

The globals (patch and position embeddings, class token, final norm, head) of
a WAVE learngene have the auxiliary width. Growing to a wider descendant,
`lg grow --widen interleave` (the default) maps target position c' to
floor(c' D / D'), the Kronecker layout of Eq. 4; `--widen tile` repeats the
whole vector. This script grows one learngene to each `--widths` both ways and
scores the descendants' step-0 top-1, before fitting (Eq. B.1 only) and after
`--fit-steps` of scaler fitting, in one run.

    OMP_NUM_THREADS=2 nice .venv/bin/python benchmarks/wave_widen.py --learngene /tmp/lg-learngene-table/wave.lg.safetensors

Results: benchmarks/wave_widen.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lgcli.api import load_learngene  # noqa: E402
from lgcli.arch import get_adapter  # noqa: E402
from lgcli.data import load_data  # noqa: E402
from lgcli.resize import expand  # noqa: E402
from lgcli.accuracy import evaluate_accuracy  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learngene", required=True, help="a WAVE learngene file")
    parser.add_argument("--data", default="fashion-mnist-mini")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--widths", default="192,256")
    parser.add_argument("--fit-steps", type=int, default=300)
    parser.add_argument("--json", type=Path, default=HERE / "wave_widen.json")
    args = parser.parse_args()

    gene = load_learngene(args.learngene)
    data = load_data(args.data, seed=0)
    adapter = get_adapter(gene.spec.family)
    rows = []
    for width in (int(w) for w in args.widths.split(",")):
        for widen in ("interleave", "tile"):
            for steps in (0, args.fit_steps):
                spec, stack, report = expand(gene, depth=args.depth, width=width, widen=widen, steps=steps,
                                             data=args.data, notify=lambda m: None)
                top1 = evaluate_accuracy(adapter.load_model(spec, stack), data.test)["top1"]
                rows.append({"width": width, "widen": widen, "fit_steps": steps, "top1": top1,
                             "seconds": report["seconds"]})
                print(f"width {width} {widen:10s} fit {steps:3d} steps: top-1 {top1:5.1f} "
                      f"({report['seconds']:.0f} s)", flush=True)
    args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, "rows": rows},
                                    indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
