"""What scoring text beside the teacher in one pass saves `lg distill`.

`lg distill` scores the student on the held-out windows before and after
training, with the teacher's own figures. On text it used to run the
teacher alone, then the student alone (loss, perplexity) and the student
again beside the teacher (KL, agreement), before and after: three passes of
the teacher and four of the student. `lgcli.held_out.HeldOutScores` now runs
one pass of both models per scoring, the first also giving the teacher's
figures: two passes of each. This times both ways on the same windows, in
one process, the ways interleaved and repeated, and checks that they give
the same figures.

By default it uses the real SmolLM2-135M (30 layers) as teacher and its
20-layer `lg shrink --method select` as student, from benchmarks/real's
cache (`python benchmarks/real/fetch.py --only kjv,smollm2`; the student
folder is made once with `lg shrink ~/.cache/lg-real/smollm2-135m --depth 20
-o ~/.cache/lg-real/smollm2-d20-select`), on held-out windows of the KJV
test split:

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/held_out_text.py [--windows 20] [--repeats 3]

Results: a table on stdout and benchmarks/held_out_text.json. Measured with
`--windows 20 --repeats 3` on the 2 development CPU cores, other jobs
paused: 25.2 s the old way, 15.8 s now (median of 3), the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

CACHE = Path(os.environ.get("LG_REAL_CACHE", Path.home() / ".cache" / "lg-real"))


def separate(scores_args, teacher, student, data):
    """The old way: the teacher alone, then before and after the student
    alone and beside the teacher (7 passes)."""
    from lgcli.held_out import score

    teacher_figures = score(teacher, None, data, **scores_args)
    before = score(student, teacher, data, **scores_args)
    after = score(student, teacher, data, **scores_args)
    return {"teacher": teacher_figures, "before": before, "after": after}


def joint(scores_args, teacher, student, data):
    """lg's way: one pass of both per scoring (4 passes)."""
    from lgcli.held_out import HeldOutScores

    scores = HeldOutScores(teacher, data, **scores_args)
    before = scores.student(student)
    return {"teacher": scores.teacher(), "before": before, "after": scores.student(student)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teacher", default=str(CACHE / "smollm2-135m"))
    parser.add_argument("--student", default=str(CACHE / "smollm2-d20-select"))
    parser.add_argument("--text", default=str(CACHE / "kjv" / "test.txt"))
    parser.add_argument("--windows", type=int, default=20, help="held-out windows of 128 tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "held_out_text.json"))
    args = parser.parse_args()

    import torch

    from lgcli.distill import read_data, read_party

    torch.manual_seed(0)
    student, teacher = read_party(args.student, "student"), read_party(args.teacher, "teacher")
    data = read_data(student, teacher, args.text, subset=8, test_subset=args.windows, seq_len=128,
                     notify=lambda message: None)
    scores_args = dict(with_labels=True, tau=1.0, device="cpu")
    times: dict[str, list[float]] = {"separate": [], "joint": []}
    figures = {}
    for _ in range(args.repeats):
        for name, way in (("separate", separate), ("joint", joint)):
            started = time.perf_counter()
            figures[name] = way(scores_args, teacher.model, student.model, data)
            times[name].append(time.perf_counter() - started)
    assert figures["separate"] == figures["joint"], figures
    separate_s, joint_s = (statistics.median(times[k]) for k in ("separate", "joint"))
    result = {
        "teacher": args.teacher, "student": args.student, "windows": len(data.test), "seq_len": 128,
        "threads": torch.get_num_threads(), "repeats": args.repeats,
        "seconds": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "median_seconds": {"separate": round(separate_s, 2), "joint": round(joint_s, 2)},
        "ratio": round(separate_s / joint_s, 2), "same_figures": True, "figures": figures["joint"],
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"| way | passes (teacher + student) | median s |\n|---|---|---|\n"
          f"| separate (before) | 3 + 4 | {separate_s:.1f} |\n| joint (now) | 2 + 2 | {joint_s:.1f} |\n"
          f"ratio {separate_s / joint_s:.2f}, the same figures; {len(data.test)} windows of 128 tokens, "
          f"{torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
