"""What `lg distill --hidden-weight W` does to a healed model (issue 28, item 2).

The example ViT (6 x 128, examples/fmnist_vit.safetensors) shrunk to 3 blocks
by weight selection (its first 3 blocks), distilled for `--steps` steps of 64
on fashion-mnist-mini (the code `lg distill` runs, seed 0, one run each):
logits alone (W = 0); W > 0 with the blocks matched by the student's
provenance (blocks 0, 1, 2: where they came from); and W > 0 with TinyBERT's
uniform map (blocks 1, 3, 5: the student handed in as a live model, or for
a Hugging Face folder as a copy without lg's metadata: no provenance). Each row gives the held-out top-1, KL from the teacher,
the hidden-state MSE against the teacher's blocks 0, 1, 2 (where the
student's blocks came from) and against its blocks 1, 3, 5 (the uniform
map), the same two yardsticks for every row, and the wall time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hidden_weight.py [--steps 200] [--weights 0.1,1]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hidden_weight.py --teacher examples/kjv_llama --data kjv-mini \
        --depth 2 --seq-len 128 --batch-size 8 --steps 150 --weights 1 --json benchmarks/hidden_weight_llama.json

(the second: the example Llama, 4 x 128, shrunk to 2 layers, on kjv-mini).

Results: a table on stdout and benchmarks/hidden_weight.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from lgcli.data import ImageData  # noqa: E402
from lgcli.distill import DistillSettings, distill, read_party, read_data  # noqa: E402
from lgcli.hidden_states import HiddenStateTerm, uniform_layer_map  # noqa: E402
from lgcli.resize import resize_file  # noqa: E402

EXAMPLE = REPO / "examples" / "fmnist_vit.safetensors"
DEPTH = 3


def hidden_mse(model, spec, teacher, data, uniform: bool) -> float:
    """The held-out hidden-state MSE against the teacher's uniformly spaced
    blocks, or against its first blocks (where the student's came from)."""
    from lgcli.held_out import agreement

    mapping = uniform_layer_map(spec.depth, teacher.spec.depth) if uniform else list(range(spec.depth))
    term = HiddenStateTerm(1.0, model, spec, teacher.model, teacher.spec, mapping)
    return round(agreement(model, teacher.model, data, hidden=term)["hidden_mse"], 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, default=EXAMPLE)
    parser.add_argument("--data", default="fashion-mnist-mini")
    parser.add_argument("--depth", type=int, default=DEPTH)
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--weights", default="0.1,1")
    parser.add_argument("--json", type=Path, default=HERE / "hidden_weight.json")
    args = parser.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    folder = Path(tempfile.mkdtemp())
    student_path = folder / ("student" if args.teacher.is_dir() else "student.safetensors")
    resize_file(args.teacher, student_path, direction="shrink", depth=args.depth, notify=lambda m: None)
    teacher = read_party(args.teacher, "teacher")
    student = read_party(student_path, "student")
    data = read_data(student, teacher, args.data, seq_len=args.seq_len, seed=0, notify=lambda m: None)
    figure = "top1" if isinstance(data, ImageData) else "perplexity"  # the held-out figure of a row
    # The uniform map: a student whose provenance does not lead to the teacher.
    unrelated = without_provenance(student_path, folder / "unrelated") if student_path.is_dir() else student.model
    cases = [("logits alone", 0.0, student_path)]
    for weight in weights:
        cases += [("provenance map", weight, student_path), ("uniform map", weight, unrelated)]
    rows = [{"case": "before", "weight": None, **agreement_of(student, teacher, data, figure)}]
    for name, weight, given in cases:
        started = time.perf_counter()
        # Text is read again for each run: its windows record the tokenizer's folder, which differs for the copy.
        reading = {} if isinstance(data, ImageData) else {"seq_len": args.seq_len}
        model, report = distill(given, args.teacher, data if not reading else args.data, **reading,
                                notify=lambda m: None,
                                settings=DistillSettings(steps=args.steps, batch_size=args.batch_size, seed=0,
                                                         progress=False, device="cpu", hidden_weight=weight))
        after = report["held_out"]["after"]
        rows.append({"case": name, "weight": weight, figure: after[figure],
                     "kl": after["kl"],
                     "first_blocks_mse": hidden_mse(model, student.spec, teacher, data, uniform=False),
                     "uniform_blocks_mse": hidden_mse(model, student.spec, teacher, data, uniform=True),
                     "teacher_blocks": report["options"].get("hidden_layers", {}).get("teacher_blocks"),
                     "seconds": round(time.perf_counter() - started, 1)})
        print(rows[-1], file=sys.stderr, flush=True)
    args.json.write_text(json.dumps({"teacher": args.teacher.name, "data": args.data, "steps": args.steps,
                                     "batch_size": args.batch_size, "seq_len": args.seq_len, "depth": args.depth,
                                     "rows": rows}, indent=2) + "\n")
    print(f"| case | W | teacher blocks | {figure} | KL | hidden MSE at its first blocks | at the uniform blocks "
          f"| seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['case']} | {row['weight'] if row['weight'] is not None else ''} | "
              f"{row.get('teacher_blocks') or ''} | {row[figure]} | {row['kl']} | {row['first_blocks_mse']} | "
              f"{row['uniform_blocks_mse']} | {row.get('seconds', '')} |")
    return 0


def without_provenance(folder: Path, copy: Path) -> Path:
    """A copy of a Hugging Face folder whose weights carry no lg metadata (a
    live language model would carry no tokenizer, which the data needs)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, copy)
    for weights in copy.glob("*.safetensors"):
        save_file(load_file(str(weights)), str(weights), metadata={"format": "pt"})
    return copy


def agreement_of(student, teacher, data, figure: str) -> dict:
    from lgcli.held_out import score

    figures = score(student.model, teacher.model, data, with_labels=True, tau=1.0, device="cpu")
    return {figure: figures[figure], "kl": figures["kl"],
            "first_blocks_mse": hidden_mse(student.model, student.spec, teacher, data, uniform=False),
            "uniform_blocks_mse": hidden_mse(student.model, student.spec, teacher, data, uniform=True)}


if __name__ == "__main__":
    raise SystemExit(main())
