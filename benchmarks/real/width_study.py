"""Issue 30's study on real weights: learngenes trained at several widths
against weight selection, BoT and the data-aware resizes, each with and
without `lg distill` at the same steps, on one ancestry at several sizes.

Every figure comes from the commands users run:

- a resize path: `lg shrink ANCESTRY --depth D --width W --method M`
  (block-ablation then activation where both depth and width shrink), then,
  at a budget B > 0, `lg distill` from the ancestry for B steps;
- a learngene path: `lg condense ANCESTRY --method KIND --steps B` (shared
  by every size), then `lg grow LG --depth D --width W` (a single-width TLEG
  reaches the other width with `--method select`, as users pipe it);
- a learngene then healed (`--distill-kinds`): the same learngene's
  descendant, then `lg distill` from the ancestry for B steps: the
  condense's B steps shared by every size, plus B per size;
- then `lg eval`'s probe (fine-tuning for --probe-steps; the final top-1
  and the top-1 before any step, the instinct).

Each job's result is a line of WORK/results.jsonl, written when it ends; a
rerun skips what is there, so a cut run resumes. Jobs run --workers at a
time (one GPU takes many), and every job still running at --deadline seconds
is stopped, so the run ends on its own within its device time.

    # on a lent GPU (benchmarks/real/gpu_width_study.sh wraps this):
    python benchmarks/real/width_study.py run --ancestry .gpu3/dinov2-s-fmnist --device cuda \\
        --sizes 6x384,12x192,6x192,3x192 --widths 192,384 --budgets 0,500,2000 --deadline 420
    python benchmarks/real/width_study.py report --work /tmp/width-study > width_study.md
    # its mechanics on the CPU, with a tiny ancestry and tiny steps:
    python benchmarks/real/width_study.py run --smoke --ancestry examples/fmnist_vit.safetensors \\
        --sizes 3x64,6x128 --widths 64,128 --budgets 0,2 --work /tmp/width-smoke
    # the example ancestry under docs/bench.md's protocol (benchmarks/learngene_distill/, on the CPU):
    python benchmarks/real/width_study.py run --ancestry examples/fmnist_vit.safetensors --data fashion-mnist \\
        --data-args="--test-subset 2000" --probe-args="--lr-sweep 3e-4,1e-3" --probe-steps 300 --eval-every 30 \\
        --sizes 3x64,6x64 --widths 64,128 --budgets 300,1500 --seeds 0,1,2 --kinds sws-widths \\
        --distill-kinds sws-widths --resizes select --batch-size 64 --device cpu --workers 2 --deadline 7000 \\
        --work /tmp/lgd-work
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lgcli.intervals import t_interval  # noqa: E402  (the repository's own, as lg bench reports)

LG = [sys.executable, "-m", "lgcli"]
# Learngene kinds condensed at every listed width at once (and TLEG at its
# own width, the single-width learngene of today): the flags after --method.
KINDS = {
    "tleg-widths": ["--method", "tleg", "--widths", "{widths}", "--width-rule", "sandwich", "--depths", "{depths}"],
    "tleg": ["--method", "tleg", "--depths", "{depths}"],
    # WAVE and SWS draw the depth too: on the example their descendants then start at 89-99 % of the
    # auxiliary model at every depth 2-12 (benchmarks/width_learngenes.md, the step-0 table).
    "wave-widths": ["--method", "wave", "--widths", "{widths}", "--width-rule", "sandwich", "--depths", "{depths}"],
    "sws-widths": ["--method", "sws", "--widths", "{widths}", "--width-rule", "sandwich", "--depths", "{depths}"],
    # SWS with a stage per layer of the deepest size: nothing shared across depth. With its default 5
    # stages a 12-layer descendant has 5 distinct blocks; on the example's 6-layer ancestry it has 5 of 6.
    "sws-widths-unshared": ["--method", "sws", "--stages", "{deepest}", "--widths", "{widths}", "--width-rule",
                            "sandwich", "--depths", "{depths}"],
    # SWS with a stage per two layers of the deepest size: on the example (6 layers, 3 stages) its start
    # is as far below the ancestry as the default's on a real 12-layer model (benchmarks/real/sws_start.py).
    "sws-widths-pairs": ["--method", "sws", "--stages", "{pairs}", "--widths", "{widths}", "--width-rule",
                         "sandwich", "--depths", "{depths}"],
    # SWS trained at the sizes' depths alone (`--depths 3,6,12`): the range 3-12 spends seven of every ten
    # passes on depths no size asks for.
    "sws-widths-listed": ["--method", "sws", "--widths", "{widths}", "--width-rule", "sandwich", "--depths",
                          "{depth_list}"],
    # SWS condensed at lg distill's rate (3e-4) instead of condensing's (1e-3): every distilled resize it is
    # compared with trains a pretrained model at 3e-4, and AdamW's first steps move each weight by about the
    # rate, so the learngene's start from the teacher's own layers may be what 1e-3 spends (not yet measured).
    "sws-widths-lr3e-4": ["--method", "sws", "--widths", "{widths}", "--width-rule", "sandwich", "--depths",
                          "{depth_list}", "--lr", "3e-4"],
    "lets": ["--method", "lets", "--depths", "{depths}", "--widths", "{widths}"],
}
RESIZES = ("select", "bot", "data-aware")
HEALED = " + distill"  # a learngene's descendant distilled from the ancestry: row "sws-widths + distill"


@dataclass
class Job:
    """Commands run in order; `needs`: jobs whose outputs they read."""

    name: str
    commands: list[list[str]]
    needs: list[str] = field(default_factory=list)
    probe: dict | None = None  # the row and cell this job's probe fills


def sizes_of(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in size.split("x")) for size in text.split(",")]


def plan(args: argparse.Namespace) -> list[Job]:
    """Every job of the study, learngenes' condenses first (the sizes wait on them)."""
    work = Path(args.work)
    sizes = sizes_of(args.sizes)
    depths = sorted({d for d, _ in sizes})
    ancestry_width = max(int(w) for w in args.widths.split(","))  # a single-width TLEG's: the widest listed
    data = ["--data", args.data, *args.data_args]
    train = ["--batch-size", str(args.batch_size), "--device", args.device, "--seed", "{seed}"]
    probe = ["--steps", str(args.probe_steps), "--eval-every", str(args.eval_every), "--device", args.device,
             "--json", *data, *args.probe_args]
    # Outputs take the ancestry's form: a folder (Hugging Face) or a file (timm).
    ext = "" if Path(args.ancestry).is_dir() else ".safetensors"
    jobs: list[Job] = []

    def probed(name: str, model: str, row: str, budget: int, size: tuple[int, int], seed: int,
               commands: list[list[str]], needs: list[str] | None = None) -> Job:
        out = work / "runs" / f"{name}.eval.json"
        return Job(name, [*commands, [*LG, "eval", model, *probe, "--seed", str(seed), ">", str(out)]], needs or [],
                   {"row": row, "budget": budget, "size": f"{size[0]}x{size[1]}", "seed": seed, "eval": str(out)})

    def distilled(student: str, name: str, budget: int, fill: dict) -> tuple[list[str], str]:
        """`lg distill` of `student` from the ancestry for `budget` steps, and the model it writes."""
        out = str(work / "models" / f"{name}.distilled{ext}")
        return [*LG, "distill", student, "--teacher", args.ancestry, *data, "--steps", str(budget),
                *[a.format(**fill) for a in train], "-o", out], out

    for seed in args.seeds:
        for budget in args.budgets:
            fill = {"seed": str(seed), "widths": args.widths, "depths": f"{depths[0]}-{max(depths[-1], 2)}",
                    "depth_list": ",".join(map(str, depths)),
                    "deepest": str(depths[-1]), "pairs": str(max(1, depths[-1] // 2))}
            for method in args.resizes:
                for depth, width in sizes:
                    name = f"{method}-b{budget}-{depth}x{width}-s{seed}"
                    model = str(work / "models" / f"{name}{ext}")
                    commands = resize_commands(args, method, depth, width, model, seed)
                    if budget:
                        distill, model = distilled(model, name, budget, fill)
                        commands.append(distill)
                    jobs.append(probed(name, model, f"{method}{' + distill' if budget else ''}", budget,
                                       (depth, width), seed, commands))
            if not budget:
                continue
            for kind in args.kinds:
                if budget not in args.kind_budgets.get(kind, [budget]):
                    continue
                flags = KINDS[kind]
                gene = str(work / "models" / f"{kind}-b{budget}-s{seed}.lg.safetensors")
                condense = f"condense-{kind}-b{budget}-s{seed}"
                saves = (["--checkpoint-every", str(args.checkpoint_every), "--checkpoint", gene + ".train.pt"]
                         if args.checkpoint_every else [])
                jobs.insert(0, Job(condense, [[*LG, "condense", args.ancestry, *[f.format(**fill) for f in flags],
                                               *data, "--steps", str(budget), *saves,
                                               *[a.format(**fill) for a in train], "-o", gene]]))
                for depth, width in sizes:
                    name = f"{kind}-b{budget}-{depth}x{width}-s{seed}"
                    model = str(work / "models" / f"{name}{ext}")
                    other_width = kind == "tleg" and width != ancestry_width
                    grow = [*LG, "grow", gene, "--depth", str(depth), "--width", str(width),
                            *(["--method", "select"] if other_width else []), "-o"]
                    jobs.append(probed(name, model, kind, budget, (depth, width), seed, [[*grow, model]], [condense]))
                    if kind in args.distill_kinds:  # the same descendant, healed for the budget's steps
                        healed = f"{kind}+distill-b{budget}-{depth}x{width}-s{seed}"
                        grown = str(work / "models" / f"{healed}{ext}")
                        distill, model = distilled(grown, healed, budget, fill)
                        jobs.append(probed(healed, model, kind + HEALED, budget, (depth, width), seed,
                                           [[*grow, grown], distill], [condense]))
    return prioritised(jobs, args.order, sizes)


def prioritised(jobs: list[Job], order: list[str], sizes: list[tuple[int, int]]) -> list[Job]:
    """Jobs in the order a cut run should finish them: by path in `order`
    (what the aims compare first), the longer budget first (the long
    condenses are the critical path), then by size as listed. A grow stays
    after its condense and, being early in the list, starts as soon as the
    condense ends. Paths `order` leaves out come last."""
    def path(job: Job) -> str:
        name = job.name.removeprefix("condense-")
        paths = [*KINDS, *RESIZES, *(kind + "+distill" for kind in KINDS)]
        return max((p for p in paths if name.startswith(p + "-b")), key=len)

    def budget(job: Job) -> int:
        return int(job.name.removeprefix("condense-")[len(path(job)) + 2:].split("-")[0])

    def size(job: Job) -> int:
        listed = [f"{d}x{w}" for d, w in sizes]
        return listed.index(job.probe["size"]) if job.probe else -1  # a condense before its grows

    def rank(job: Job) -> tuple:
        return (order.index(path(job)) if path(job) in order else len(order), -budget(job), size(job))

    return sorted(jobs, key=rank)


def resize_commands(args: argparse.Namespace, method: str, depth: int, width: int, out: str,
                    seed: int) -> list[list[str]]:
    """`lg shrink` to depth x width by `method`; the data-aware path drops
    blocks by block ablation and channels by activation importance, one
    step each (a shrink takes one method)."""
    shrink = [*LG, "shrink"]
    if method != "data-aware":
        return [[*shrink, args.ancestry, "--depth", str(depth), "--width", str(width), "--method", method,
                 "--seed", str(seed), "-o", out]]
    calibrate = ["--calibrate", args.data, "--calibrate-samples", str(args.calibrate_samples)]
    middle = out.removesuffix(".safetensors") + ".depth" + (".safetensors" if out.endswith(".safetensors") else "")
    return [[*shrink, args.ancestry, "--depth", str(depth), "--method", "block-ablation", *calibrate, "-o", middle],
            [*shrink, middle, "--width", str(width), "--method", "activation", *calibrate, "-o", out]]


def done(work: Path) -> dict[str, dict]:
    path = work / "results.jsonl"
    if not path.exists():
        return {}
    return {row["job"]: row for row in map(json.loads, path.read_text().splitlines()) if row.get("job")}


def outputs(job: Job) -> list[str]:
    """What the job's commands write (their -o)."""
    return [command[command.index("-o") + 1] for command in job.commands if "-o" in command]


def run_job(job: Job, work: Path, stop_at: float) -> dict:
    """Run a job's commands in order (a '>' redirects stdout to a file);
    its result, with the probe's figures where it has one."""
    log = open(work / "logs" / f"{job.name}.log", "w")
    started = time.time()
    for stale in map(Path, outputs(job)):  # what a cut run of this job left: it starts again from nothing
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    for command in job.commands:
        # ... but a condense cut after a checkpoint goes on from it, so a long
        # condense can span two device calls.
        saved = Path(command[command.index("--checkpoint") + 1]) if "--checkpoint" in command else None
        if saved and saved.exists():
            command = [*command, "--resume"]
        target = None
        if ">" in command:
            command, target = command[:command.index(">")], command[command.index(">") + 1]
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        stdout = open(target, "w") if target else log
        try:
            code = subprocess.run(command, stdout=stdout, stderr=log, cwd=REPO,
                                  timeout=max(1.0, stop_at - time.time())).returncode
        except subprocess.TimeoutExpired:
            code = "deadline"
        if target:
            stdout.close()
        if code != 0:
            return {"job": job.name, "ok": False, "exit": code, "seconds": round(time.time() - started, 1),
                    "failed": " ".join(command[2:5])}
    result = {"job": job.name, "ok": True, "seconds": round(time.time() - started, 1)}
    if job.probe:
        row = json.loads(Path(job.probe["eval"]).read_text())["rows"][0]
        result.update({k: v for k, v in job.probe.items() if k != "eval"},
                      final=row["final"]["top1"], instinct=row["instinct"]["top1"])
    return result


def run(args: argparse.Namespace) -> None:
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    work = Path(args.work)
    for sub in ("models", "runs", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    if args.results_from and not (work / "results.jsonl").exists():
        shutil.copyfile(args.results_from, work / "results.jsonl")
    stop_at = time.time() + args.deadline
    results = done(work)
    planned = plan(args)
    ok = {name for name, row in results.items() if row.get("ok")}
    jobs = [job for job in planned if job.name not in ok]
    # A finished condense whose learngene is not here (results carried from
    # another machine, whose models stayed there) runs again for the grows
    # that still need it.
    needed = {name for job in jobs for name in job.needs}
    for job in planned:
        if job.name in needed & ok and not all(Path(out).exists() for out in outputs(job)):
            ok.discard(job.name)
            jobs.insert(0, job)
    failed: set[str] = set()
    print(f"{len(jobs)} jobs to run ({len(ok)} done before), {args.workers} at a time, "
          f"for at most {args.deadline} s", file=sys.stderr)
    with ThreadPoolExecutor(args.workers) as pool, open(work / "results.jsonl", "a") as out:
        running: dict = {}
        while (jobs or running) and time.time() < stop_at:
            for job in [j for j in jobs if any(n in failed for n in j.needs)]:
                jobs.remove(job)  # what it needs failed: it cannot run
            ready = [j for j in jobs if all(n in ok for n in j.needs)]
            while ready and len(running) < args.workers:
                job = ready.pop(0)
                jobs.remove(job)
                running[pool.submit(run_job, job, work, stop_at)] = job
            if not running:
                break
            finished, _ = wait(running, timeout=5, return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                result = future.result()
                (ok if result["ok"] else failed).add(job.name)
                out.write(json.dumps(result) + "\n")
                out.flush()
                print(f"{job.name}: {'ok' if result['ok'] else 'FAILED ' + str(result.get('exit'))} "
                      f"{result['seconds']} s {result.get('final', '')}", file=sys.stderr)
    print(f"ended after {args.deadline - max(0, stop_at - time.time()):.0f} s; {len(jobs)} jobs not started",
          file=sys.stderr)


def report(args: argparse.Namespace) -> None:
    """The study's table: final top-1 (the instinct in brackets), the mean
    over seeds with a 95 % t-interval where there are several."""
    rows = [r for r in done(Path(args.work)).values() if r.get("ok") and "final" in r]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    keys = sorted({(r["budget"], r["row"]) for r in rows})
    print("| budget | path | " + " | ".join(sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for budget, row in keys:
        cells = []
        for size in sizes:
            got = [r for r in rows if (r["budget"], r["row"], r["size"]) == (budget, row, size)]
            if not got:
                cells.append("–")
                continue
            final = t_interval([r["final"] for r in got])
            instinct = sum(r["instinct"] for r in got) / len(got)
            span = f" [{final['low']:.1f}, {final['high']:.1f}]" if final["n"] > 1 else ""
            cells.append(f"{final['mean']:.1f}{span} ({instinct:.1f}) · {final['n']}")
        print(f"| {budget} | {row} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "report"))
    parser.add_argument("--ancestry", default=".gpu3/dinov2-s-fmnist")
    parser.add_argument("--data", default="fashion-mnist-mini")
    parser.add_argument("--sizes", default="6x384,12x192,6x192,3x192")
    parser.add_argument("--widths", default="192,384", help="the widths the width-trained learngenes train at")
    parser.add_argument("--budgets", default="0,500,2000", help="training steps each path gets (0: none)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--kinds", default=",".join(KINDS), help="learngene kinds condensed")
    parser.add_argument("--kind-budgets", default="",
                        help="KIND=B/B,...: these kinds only at these budgets (the others at every budget)")
    parser.add_argument("--distill-kinds", default="",
                        help="kinds whose descendants are also distilled from the ancestry for the budget's steps "
                             "(rows 'KIND + distill'; order key 'KIND+distill')")
    parser.add_argument("--resizes", default=",".join(RESIZES), help="resize paths")
    parser.add_argument("--order", default="",
                        help="paths in the order a run cut at --deadline should finish them (default: as planned)")
    parser.add_argument("--batch-size", type=int, default=256, help="of condense and distill")
    parser.add_argument("--checkpoint-every", type=int, default=250,
                        help="a condense saves its run this often, and a rerun of the study resumes it (0: never)")
    parser.add_argument("--probe-steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--calibrate-samples", type=int, default=256)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--deadline", type=float, default=420, help="seconds; jobs still running then are stopped")
    parser.add_argument("--work", default="/tmp/width-study")
    parser.add_argument("--results-from", help="a results.jsonl of earlier runs: its jobs are not run again "
                        "(copied into --work when that has none)")
    parser.add_argument("--data-args", default="", help="more options of every command's data "
                        "(--data-args='--test-subset 2000')")
    parser.add_argument("--probe-args", default="", help="more options of lg eval's probe "
                        "(--probe-args='--lr-sweep 3e-4,1e-3')")
    parser.add_argument("--smoke", action="store_true", help="tiny data and probe: the mechanics only")
    args = parser.parse_args()
    args.budgets = [int(b) for b in args.budgets.split(",")]
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.distill_kinds = [k for k in args.distill_kinds.split(",") if k]
    args.resizes = [r for r in args.resizes.split(",") if r]
    unknown = set(args.kinds) - set(KINDS) | set(args.resizes) - set(RESIZES)
    if unknown:
        parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
    if set(args.distill_kinds) - set(args.kinds):
        parser.error(f"--distill-kinds {','.join(sorted(set(args.distill_kinds) - set(args.kinds)))}: "
                     f"not among --kinds (a descendant is distilled from a learngene the study condenses)")
    args.kind_budgets = {kind: [int(b) for b in budgets.split("/")]
                         for kind, budgets in (item.split("=") for item in args.kind_budgets.split(",") if item)}
    args.order = [p for p in args.order.split(",") if p] or [*args.kinds, *args.resizes]
    args.data_args = ["--subset", "256", "--test-subset", "64"] if args.smoke else args.data_args.split()
    args.probe_args = args.probe_args.split()
    if args.smoke:
        args.probe_steps, args.eval_every, args.batch_size, args.calibrate_samples = 2, 1, 16, 8
    os.environ.setdefault("PYTHONPATH", str(REPO))
    (run if args.action == "run" else report)(args)


if __name__ == "__main__":
    main()
