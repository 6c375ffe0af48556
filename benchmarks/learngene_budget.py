"""The condense-budget study (issue 19): every learngene kind at every size, at
honest condense budgets, beside the training-free methods, on the example
ancestry and full Fashion-MNIST.

Every figure comes from the commands users run: `lg condense` makes each
learngene, `lg grow` / `lg shrink` make each descendant (a size a kind cannot
build directly goes through a pipe with a resize method, and the result says
so), and `lg eval`'s probe scores it (the bench's protocol: 300 steps at
batch 64, the best of three rates, the test split every 30 steps). Nothing is
re-implemented here: this file only schedules those commands, keeps what
they print, and draws the table and the figure.

The study takes many CPU hours, so it is a list of jobs, each saved as JSON
the moment it finishes (``results/``); a rerun skips what is done and picks
up the rest. Several workers can share one results folder (a job is claimed
with a lock file). Each job runs in a fresh process, with the lg of the
checkout this file is in: a checkout moved forward between jobs is used by
the next job.

    OMP_NUM_THREADS=1 nice python benchmarks/learngene_budget.py run --workers 2
    python benchmarks/learngene_budget.py status
    python benchmarks/learngene_budget.py report     # -> learngene_budget.md, learngene_budget.png

Results: ``benchmarks/learngene_budget/results/*.json`` (kept in git);
learngenes and descendants go to ``--cache`` (not kept: a learngene a job
needs and the cache lacks is condensed again by its recorded command, which
writes the same bytes, checked against the recorded sha256).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLE = REPO / "examples" / "fmnist_vit.safetensors"
DEFAULT_OUT = HERE / "learngene_budget"
DEFAULT_CACHE = Path(os.environ.get("LG_STUDY_CACHE", "/tmp/lg-study-cache"))

DATA = "fashion-mnist"
ANCESTRY_STEPS = 12_000  # what examples/train_fmnist_vit.py trained the ancestry for
SIZES = [(3, 128), (3, 64), (6, 64), (8, 128), (12, 128), (9, 192)]
# The order jobs run in: the headline size below the ancestry, then one above it.
RUN_ORDER = [(3, 128), (8, 128), (3, 64), (6, 64), (12, 128), (9, 192)]
PROBE = ["--data", DATA, "--test-subset", "2000", "--steps", "300", "--lr-sweep", "1e-4,3e-4,1e-3",
         "--eval-every", "30", "--batch-size", "64", "--seed", "0"]
CONDENSE = ["--data", DATA, "--seed", "0"]
BASELINES = ["select", "auto-lg", "bot", "clone"]
# WAVE fit settings (steps, lr, batch) measured at 6 x 192: the first is the default before issue 19.
WAVE_FITS = [(300, 1e-3, 32), (150, 2e-3, 32), (100, 3e-3, 32), (150, 3e-3, 16), (60, 1e-2, 32)]
# How a learngene reaches a width it does not build (TLEG builds only its
# own): a pipe into this resize method, which the result names.
WIDTH_METHOD = "bot"


@dataclass
class Job:
    name: str
    kind: str  # condense | probe | instinct
    needs: list[str] = field(default_factory=list)
    spec: dict = field(default_factory=dict)


def learngenes() -> list[dict]:
    """The learngenes of the study, most telling first: the warm starts at a
    twentieth of the ancestry's training, the cold starts at half of it, then
    the rest of the ladder."""
    out = []

    def gene(kind: str, steps: int, init: str = "random", lr: float = 1e-3, extra: tuple = (),
             until: float | None = None, batch: int = 64) -> None:
        if kind == "peg":  # sampled from the ancestry: no training, no budget
            out.append({"name": "peg-sampled", "kind": kind, "steps": 0, "init": "sampled", "lr": lr,
                        "flags": ["--method", "peg"]})
            return
        name = f"{kind}-{init}-{steps}" + ("" if lr == 1e-3 else f"-lr{lr:g}") + (f"-until{until:g}" if until else "") \
            + ("" if batch == 64 else f"-batch{batch}")
        if until:
            extra = (*extra, "--until", f"{until:g}")
        # SWS with its defaults (5 stages over the ancestry's 6 layers); LeTs
        # trained at every depth, as TLEG (its compact learngene: 3 layers of 64).
        options = {"tleg": ["--depths", "2-12"], "wave": ["--template-dim", "64"], "sws": [],
                   "lets": ["--depths", "2-12"]}[kind]
        # Before --init existed, every condense started from random weights.
        init_flags = ["--init", init] if supports_init() else []
        out.append({"name": name, "kind": kind, "steps": steps, "init": init, "lr": lr, "until": until,
                    "batch": batch,
                    "flags": ["--method", kind, *options, *init_flags, "--steps", str(steps), "--lr", f"{lr:g}",
                              "--batch-size", str(batch), *extra]})

    if supports_init():
        gene("tleg", 600, "ancestry")
        gene("wave", 600, "ancestry")
    gene("tleg", 300)
    gene("tleg", 6000)
    gene("peg", 0)
    gene("wave", 300)
    gene("wave", 6000)
    if supports_init():
        # Each lever against the plain run at equal steps: the cold start at 600.
        gene("tleg", 600)
        gene("wave", 600)
        gene("tleg", 600, "ancestry", lr=3e-4)
        gene("wave", 600, "ancestry", lr=3e-4)
        gene("tleg", 600, "ancestry", batch=128)
        gene("tleg", 600, "ancestry", lr=3e-3)
        gene("tleg", 300, "ancestry")
        gene("wave", 300, "ancestry")
        gene("tleg", 1500, "ancestry")
        gene("wave", 1500, "ancestry")
        gene("tleg", 6000, "ancestry", until=0.98)
        gene("wave", 6000, "ancestry", until=0.98)
    gene("tleg", 1500)
    gene("wave", 1500)
    gene("tleg", 12000)
    gene("wave", 12000)
    if supports_init():
        # Issue 30: the kinds added since, at the warm starts' budgets.
        for kind in ("sws", "lets"):
            gene(kind, 600, "ancestry")
            gene(kind, 1500, "ancestry")
    return out


def supports_init() -> bool:
    """Whether this checkout's lg condense has --init (the warm start)."""
    sys.path.insert(0, str(REPO))
    try:
        from lgcli.learngenes import get_kind
    finally:
        sys.path.pop(0)
    return any(option.name == "init" for option in get_kind("tleg").condense_options)


def jobs() -> list[Job]:
    """Every job, in the order workers take them: the headline size (3 x 128,
    below the ancestry) for the first learngenes, then the other sizes, then
    the rest of the budget ladder. A job waiting on another's result is
    passed over until that one is done."""
    sizes = [f"{d}x{w}" for d, w in RUN_ORDER]

    def baselines(size: str) -> list[Job]:
        depth, width = map(int, size.split("x"))
        return [Job(f"probe-{m}@{size}", "probe", spec={"method": m, "size": [depth, width]})
                for m in ["random", *BASELINES]]

    def probes(gene: dict, size: str) -> list[Job]:
        depth, width = map(int, size.split("x"))
        rows = [gene["kind"]] + ([f"{gene['kind']}+fit"] if gene["kind"] in ("wave", "peg") else [])
        return [Job(f"probe-{row}:{gene['name']}@{size}", "probe", [f"condense-{gene['name']}"],
                    spec={"method": row, "gene": gene["name"], "size": [depth, width]}) for row in rows]

    instincts: list[Job] = []

    def made(gene: dict) -> list[Job]:
        out = [Job(f"condense-{gene['name']}", "condense", spec=gene)]
        if gene["kind"] == "tleg":  # the first learngenes' right away, the rest's at the end (5 minutes each)
            job = Job(f"instinct-{gene['name']}", "instinct", [f"condense-{gene['name']}"], spec=gene)
            (out if gene in genes[:7] else instincts).append(job)
        return out

    genes = learngenes()
    first, rest = genes[:7], genes[7:]
    out = baselines(sizes[0])
    for gene in first:
        out += made(gene) + probes(gene, sizes[0])
    if supports_init():
        # WAVE's scaler fit at 6 x 192 (benchmarks/wave_fit_speed.py's case):
        # today's default (300 steps, lr 1e-3, batch 32) against cheaper ones.
        out += baselines("6x192")
        for steps, lr, batch in WAVE_FITS:
            out.append(Job(f"probe-wave+fit:wave-ancestry-600@6x192~{steps}-{lr:g}-{batch}", "probe",
                           ["condense-wave-ancestry-600"],
                           spec={"method": "wave+fit", "gene": "wave-ancestry-600", "size": [6, 192],
                                 "fit": [steps, lr, batch]}))
    # At the other sizes, what the aims are judged by comes first: the
    # training-free methods and random, then the learngenes at half the
    # ancestry's budget or less with the lowest rung (300 steps) last.
    lowest = [gene for gene in first if gene["steps"] == 300]
    judged = [gene for gene in first if gene not in lowest]
    levers = [gene for gene in rest if gene["init"] == "ancestry" or gene["steps"] == 600]
    ladder = [gene for gene in rest if gene not in levers]
    # The warm starts' other budgets (300, 1,500 steps, the stopping rule),
    # which tell whether 600 steps are enough at a size: at the sizes smaller
    # than the headline one (cheap to probe) before the largest size's
    # learngenes, at the others after them.
    budgets = [gene for gene in levers if gene["init"] == "ancestry" and gene["lr"] == 1e-3
               and gene["batch"] == 64]
    headline = RUN_ORDER[0][0] * RUN_ORDER[0][1] ** 2
    small = [f"{d}x{w}" for d, w in RUN_ORDER[1:] if d * w * w < headline]
    for index, size in enumerate(sizes[1:]):
        if size == sizes[-1]:
            out += [job for s in small for gene in budgets for job in probes(gene, s)]
        out += baselines(size)
        for gene in judged:
            out += probes(gene, size)
        if index == 0:  # after one size above the ancestry: every lever at the headline size
            for gene in levers:
                out += made(gene) + probes(gene, sizes[0])
    # The ladder's top rung, the ancestry's own budget, next: the issue
    # names it, and each of its condenses takes about an hour.
    top = [gene for gene in ladder if gene["steps"] == ANCESTRY_STEPS]
    for gene in top:
        out += made(gene) + probes(gene, sizes[0])
    for gene in top:
        for size in sizes[1:]:
            out += probes(gene, size)
    for size in sizes[1:]:
        if size not in small:
            for gene in budgets:
                out += probes(gene, size)
    # The rest of the ladder (300 and 1,500 steps from random) at every size
    # before the levers' cells away from the headline size: the issue asks
    # for the ladder at every size, the levers only against the plain run.
    # Size by size, the costliest (9 x 192) last.
    rungs = lowest + [gene for gene in ladder if gene not in top]
    for gene in rungs:
        if gene not in lowest:
            out += made(gene) + probes(gene, sizes[0])
    for size in sizes[1:]:
        for gene in rungs:
            out += probes(gene, size)
    # Every TLEG learngene's instinct at depths 2 to 12 (the fourth aim), then
    # the levers' cells away from the headline size.
    out += instincts
    for gene in levers:
        for size in sizes[1:]:
            out += probes(gene, size)
    return out


# ---------------------------------------------------------------- running one job

def lg(*args: str, stdin=None, stdout=subprocess.PIPE, check: bool = True) -> subprocess.CompletedProcess:
    """One lg command of this checkout, as a user types it."""
    command = [sys.executable, "-m", "lgcli", *args]
    done = subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=_env(), cwd=REPO)
    if check and done.returncode != 0:
        raise CommandFailed(shown_command(args), done.stderr.decode(errors="replace").strip().splitlines())
    return done


def lg_pipe(first: list[str], second: list[str]) -> None:
    """``lg FIRST -o - | lg SECOND``."""
    one = subprocess.Popen([sys.executable, "-m", "lgcli", *first], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=_env(), cwd=REPO)
    try:
        two = lg(*second, stdin=one.stdout)
    finally:
        one.stdout.close()
        one.wait()
    if one.returncode != 0:
        raise CommandFailed(shown_command(first), one.stderr.read().decode(errors="replace").strip().splitlines())
    return two


class CommandFailed(Exception):
    def __init__(self, command: str, lines: list[str]):
        super().__init__(f"{command}: {lines[-1] if lines else 'failed'}")
        self.command, self.lines = command, lines


def shown_command(args) -> str:
    return "lg " + " ".join(shlex.quote(str(a)) for a in args)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["LG_NO_PROGRESS"] = "1"
    return env


def run_condense(job: Job, cache: Path) -> dict:
    gene = job.spec
    path = cache / f"{gene['name']}.lg.safetensors"
    args = ["condense", str(EXAMPLE), *gene["flags"], *CONDENSE, "-o", str(path), "--force", "--json"]
    started = time.perf_counter()
    done = lg(*args)
    seconds = time.perf_counter() - started
    report = json.loads(done.stdout)
    return {"command": shown_command(args), "wall_seconds": round(seconds, 1), "report": report,
            "sha256": _sha256(path)}


def descendant(spec: dict, cache: Path, results: Path) -> tuple[Path | None, list[str], str | None]:
    """Build the probed model; return (file, the commands that made it, why
    not when the method cannot reach the size)."""
    depth, width = spec["size"]
    method = spec["method"]
    size = ["--depth", str(depth), "--width", str(width)]
    name = f"{method.replace('+', '_')}{'-' + spec['gene'] if 'gene' in spec else ''}@{depth}x{width}"
    path = cache / f"{name}.safetensors"
    if method == "random":
        # timm's own init of the size, seeded as `lg eval --baseline random`
        sys.path.insert(0, str(REPO))
        from lgcli.api import create_model, load, save_model
        from lgcli.sizing import target_spec

        spec_ = target_spec(load(str(EXAMPLE)).spec, depth=depth, width=width)
        save_model(create_model(spec_, seed=0), path, force=True)
        return path, ["lgcli.api.create_model(target_spec(ancestry, depth, width), seed=0)"], None
    if "gene" not in spec:
        ancestry = 6, 128
        grows = depth >= ancestry[0] and width >= ancestry[1]
        shrinks = depth <= ancestry[0] and width <= ancestry[1]
        if not (grows or shrinks):
            return None, [], "no single resize reaches it"
        args = ["grow" if grows else "shrink", str(EXAMPLE), *size, "--method", method, "-o", str(path), "--force"]
        done = lg(*args, check=False)
        if done.returncode != 0:
            return None, [shown_command(args)], done.stderr.decode(errors="replace").strip().splitlines()[-1]
        return path, [shown_command(args)], None
    gene = learngene_file(spec["gene"], cache, results)
    fit = []
    if method.endswith("+fit"):  # the grow defaults (300 steps), or the settings the job names
        steps, lr, batch = spec.get("fit", (300, None, None))
        fit = ["--data", DATA, "--steps", str(steps), *(["--lr", f"{lr:g}"] if lr else []),
               *(["--batch-size", str(batch)] if batch else [])]
        path = path.with_name(path.name.replace("@", f"-{steps}-{lr}-{batch}@"))
    direct = ["grow", str(gene), *size, *fit, "-o", str(path), "--force", "--json"]
    done = lg(*direct, check=False)
    if done.returncode == 0:
        spec["grown"] = {k: v for k, v in json.loads(done.stdout).get("details", {}).items()
                         if k in ("fitted", "steps", "lr", "loss_first", "loss_last", "seconds")}
        return path, [shown_command(direct[:-1])], None
    # The kind builds only some widths (TLEG its own): its nearest width, then
    # a resize. Why the direct build failed is kept with the result, so a
    # pipe taken for another reason (a crash) is seen, not taken for a rule.
    spec["direct_failed"] = (done.stderr.decode(errors="replace").strip().splitlines() or ["(no message)"])[-1]
    own = json.loads(lg("inspect", str(gene), "--json").stdout)
    own_width = int(own.get("auxiliary", {}).get("width") or own.get("width") or 128)
    first = ["grow", str(gene), "--depth", str(depth), "--width", str(own_width), *fit, "-o", "-"]
    direction = "shrink" if width < own_width else "grow"
    second = [direction, "-", "--width", str(width), "--method", WIDTH_METHOD, "-o", str(path), "--force"]
    lg_pipe(first, second)
    return path, [f"{shown_command(first)} | {shown_command(second)}"], None


def learngene_file(name: str, cache: Path, results: Path) -> Path:
    """The learngene `name`'s file in the cache. The cache is not kept (the
    results are): on another machine or after a clean-up, the learngene is
    condensed again by its recorded command, which writes the same bytes
    (same command and seed), and the sha256 its result recorded is checked."""
    path = cache / f"{name}.lg.safetensors"
    if path.exists():
        return path
    saved = json.loads(result_path(results, f"condense-{name}").read_text())
    gene = next(g for g in learngenes() if g["name"] == name)
    print(f"[{time.strftime('%H:%M:%S')}] {name}: not in the cache, condensed again", file=sys.stderr, flush=True)
    remade = run_condense(Job(f"condense-{name}", "condense", spec=gene), cache)
    if saved.get("sha256") and remade["sha256"] != saved["sha256"]:
        raise CommandFailed(remade["command"], [f"condensed again, {name} has sha256 {remade['sha256']}, "
                                                f"not the {saved['sha256']} its result recorded"])
    return path


def run_probe(job: Job, cache: Path, results: Path) -> dict:
    started = time.perf_counter()
    path, commands, why_not = descendant(job.spec, cache, results)
    build_seconds = time.perf_counter() - started
    out = {"spec": job.spec, "build": commands, "build_seconds": round(build_seconds, 1)}
    if path is None:
        return {**out, "status": "n/a", "reason": why_not}
    sha = _sha256(path)
    out["sha256"] = sha
    twin = _probed_twin(results, sha)
    if twin is not None:  # the very same weights were probed already (select and auto-lg when shrinking)
        return {**out, "status": "done", "same_file_as": twin["job"], "row": twin["row"], "eval": twin["eval"]}
    args = ["eval", str(path), *PROBE, "--json"]
    started = time.perf_counter()
    report = json.loads(lg(*args).stdout)
    return {**out, "status": "done", "eval": shown_command(args), "eval_seconds": round(time.perf_counter() - started, 1),
            "row": report["rows"][0]}


def run_instinct(job: Job, cache: Path, results: Path) -> dict:
    """A TLEG learngene's descendants at every depth 2..12, scored before
    any training, against its auxiliary model (the issue's 95 % aim)."""
    gene = learngene_file(job.spec["name"], cache, results)
    scores = {}
    for depth in range(2, 13):
        path = cache / f"instinct-{job.spec['name']}-{depth}.safetensors"
        lg("grow", str(gene), "--depth", str(depth), "-o", str(path), "--force")
        report = json.loads(lg("eval", str(path), "--data", DATA, "--json").stdout)
        scores[depth] = report["rows"][0]["final"]["top1"]
        path.unlink()
    return {"spec": job.spec, "top1_by_depth": scores}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _probed_twin(results: Path, sha: str) -> dict | None:
    for path in sorted(results.glob("probe-*.json")):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if saved.get("sha256") == sha and saved.get("row") and "same_file_as" not in saved:
            return {**saved, "job": saved["job"]}
    return None


# ---------------------------------------------------------------- scheduling

def result_path(results: Path, name: str) -> Path:
    return results / f"{name.replace(':', '~').replace('+', '_')}.json"


def done(results: Path, name: str) -> bool:
    return result_path(results, name).exists()


def claim(results: Path, name: str) -> bool:
    lock = result_path(results, name).with_suffix(".lock")
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            pid = int(lock.read_text() or 0)
            os.kill(pid, 0)
            return False
        except (ValueError, ProcessLookupError, FileNotFoundError):
            lock.unlink(missing_ok=True)  # its worker died: take it over
            return claim(results, name)
        except PermissionError:
            return False
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))
    return True


def run_one(results: Path, cache: Path) -> str:
    """Run the first job that is free and ready. Returns 'ran', 'wait'
    (jobs left, but waiting on others) or 'done'."""
    pending = [job for job in jobs() if not done(results, job.name)]
    if not pending:
        return "done"
    for job in pending:
        if not all(done(results, need) for need in job.needs):
            continue
        failed = [need for need in job.needs if json.loads(result_path(results, need).read_text()).get("status") == "failed"]
        if failed:
            _save(results, job.name, {"job": job.name, "status": "failed", "reason": f"{failed[0]} failed"})
            return "ran"
        if not claim(results, job.name):
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {job.name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            runner = {"condense": run_condense, "probe": run_probe, "instinct": run_instinct}[job.kind]
            result = runner(job, cache) if job.kind == "condense" else runner(job, cache, results)
        except CommandFailed as exc:
            result = {"status": "failed", "command": exc.command, "stderr": exc.lines[-20:]}
        result = {"job": job.name, "status": "done", **result,
                  "seconds": round(time.perf_counter() - started, 1), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        _save(results, job.name, result)
        result_path(results, job.name).with_suffix(".lock").unlink(missing_ok=True)
        print(f"[{time.strftime('%H:%M:%S')}] {job.name}: {result['status']} in {result['seconds']:.0f} s",
              file=sys.stderr, flush=True)
        return "ran"
    return "wait"


def _save(results: Path, name: str, result: dict) -> None:
    path = result_path(results, name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def worker(out: Path, cache: Path) -> None:
    """Run jobs until none is left, each in a fresh process (so the
    checkout's newest lg runs it)."""
    while True:
        code = subprocess.run([sys.executable, __file__, "one", "--out", str(out), "--cache", str(cache)]).returncode
        if code == 0:
            continue
        if code == 3:
            time.sleep(30)  # waiting on another worker's job
            continue
        if code == 4:
            return
        time.sleep(10)


# ---------------------------------------------------------------- report

def load_results(results: Path) -> dict[str, dict]:
    out = {}
    for path in sorted(results.glob("*.json")):
        saved = json.loads(path.read_text())
        out[saved["job"]] = saved
    return out


def report(out: Path) -> str:
    """The markdown table and the figure (final top-1 against condense seconds)."""
    sys.path.insert(0, str(REPO))
    from lgcli.evaluate import steps_to_reach

    saved = load_results(out / "results")
    sizes = [f"{d}x{w}" for d, w in SIZES]
    randoms = {s: saved.get(f"probe-random@{s}", {}).get("row") for s in sizes}

    def cell(result: dict | None, size: str) -> str:
        if not result:
            return "…"
        if result.get("status") == "n/a":
            return "n/a"
        if result.get("status") != "done":
            return "failed"
        row = result["row"]
        text = f"{row['final']['top1']:.1f} ({row['instinct']['top1']:.1f})"
        random = randoms.get(size)
        if random and result["spec"]["method"] != "random":
            steps = steps_to_reach(row["curve"], random["final"]["top1"])
            reference = steps_to_reach(random["curve"], random["final"]["top1"])
            speedup = (reference / steps) if steps else None
            text += " · never" if steps is None else (
                " · at the start" if not steps else f" · {steps:.0f} ({speedup:.{0 if speedup >= 10 else 1}f}x)")
        if len(result.get("build", [])) == 1 and " | " in result["build"][0]:
            text += " †"
        return text

    lines = ["| row | condense | aux top-1 | " + " | ".join(s.replace("x", " x ") for s in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]
    for method in ["random", *BASELINES]:
        lines.append(f"| {method} | - | - | " + " | ".join(cell(saved.get(f"probe-{method}@{s}"), s) for s in sizes) + " |")
    for gene in learngenes():
        condensed = saved.get(f"condense-{gene['name']}")
        cost, aux = (f"{gene['steps']} steps …" if gene["steps"] else "sampled …"), "…"
        if condensed and condensed.get("status") == "done":
            ran = condensed["report"].get("steps", gene["steps"])
            cost = f"{ran} steps, {condensed['wall_seconds']:.0f} s" if gene["steps"] else "sampled"
            accuracy = condensed["report"].get("accuracy", {}).get("top1")
            aux = f"{accuracy:.1f}" if accuracy is not None else "-"
        for row in [gene["kind"]] + ([f"{gene['kind']}+fit"] if gene["kind"] in ("wave", "peg") else []):
            cells = [cell(saved.get(f"probe-{row}:{gene['name']}@{s}"), s) for s in sizes]
            label = row + {"ancestry": " (from the ancestry)", "random": " (random start)"}.get(gene["init"], "") + (
                "" if gene["lr"] == 1e-3 else f", lr {gene['lr']:g}") + (
                f", --until {gene['until']:g}" if gene.get("until") else "") + (
                f", batch {gene['batch']}" if gene.get("batch", 64) != 64 else "")
            lines.append(f"| {label} | {cost} | {aux} | " + " | ".join(cells) + " |")
    caption = ("Final top-1 % after the 300-step probe, best of rates 1e-4, 3e-4, 1e-3 (instinct at step 0) · steps "
               "to random's final (speed-up); full Fashion-MNIST, 2,000 test images, seed 0. † built through a pipe "
               f"with `{WIDTH_METHOD}` for the width the kind does not build. … not run yet.")
    instincts = []
    for gene in learngenes():
        result = saved.get(f"instinct-{gene['name']}")
        condensed = saved.get(f"condense-{gene['name']}")
        if result and result.get("status") == "done" and condensed:
            aux = condensed["report"]["accuracy"]["top1"]
            worst = min(result["top1_by_depth"].values())
            instincts.append(f"| {gene['name']} | {aux:.1f} | " + " | ".join(
                f"{v:.1f}" for v in result["top1_by_depth"].values()) + f" | {worst / aux * 100:.0f} % |")
    text = "\n".join(lines) + "\n\n" + caption + "\n\n" + aims(saved, sizes) + "\n"
    if instincts:
        text += ("\n| TLEG learngene | aux top-1 | " + " | ".join(f"depth {d}" for d in range(2, 13))
                 + " | worst / aux |\n|---|---|" + "---|" * 12 + "\n" + "\n".join(instincts) + "\n\n"
                 "Step-0 top-1 % of descendants at every depth (full 10,000-image test set).\n")
    _figure(saved, out.parent / "learngene_budget.png", sizes)
    return text


def aims(saved: dict, sizes: list[str]) -> str:
    """The issue's aims, size by size: the best training-free method against
    the best learngene at half the ancestry's training or less, and against
    the best TLEG or WAVE at a twentieth of it or less (600 steps)."""

    def final(name: str) -> float | None:
        result = saved.get(name)
        return result["row"]["final"]["top1"] if result and result.get("status") == "done" else None

    def best(rows: list[tuple[str, str]], size: str) -> tuple[float, str] | None:
        scored = [(final(f"{job}@{size}"), label) for job, label in rows]
        return max(((top1, label) for top1, label in scored if top1 is not None), default=None)

    def within(gene: dict, most_steps: int, kinds: tuple[str, ...]) -> list[tuple[str, str]]:
        if gene["kind"] not in kinds or gene["steps"] > most_steps:
            return []
        start = {"ancestry": "from the ancestry", "random": "random start"}.get(gene["init"], gene["init"])
        budget = f"--until {gene['until']:g}" if gene.get("until") else f"{gene['steps']} steps"
        label = f"{gene['kind']} ({start}, {budget})" if gene["steps"] else f"{gene['kind']} (sampled)"
        rows = [gene["kind"]] + ([f"{gene['kind']}+fit"] if gene["kind"] in ("wave", "peg") else [])
        return [(f"probe-{row}:{gene['name']}", label.replace(gene["kind"], row, 1)) for row in rows]

    half = [row for gene in learngenes() for row in within(gene, ANCESTRY_STEPS // 2, ("tleg", "wave", "peg"))]
    twentieth = [row for gene in learngenes() for row in within(gene, ANCESTRY_STEPS // 20, ("tleg", "wave"))]
    lines = ["| size | best training-free | best learngene, <= 6,000 steps | aim | "
             "best TLEG/WAVE, <= 600 steps | aim |", "|---|---|---|---|---|---|"]
    for size in sizes:
        depth, width = map(int, size.split("x"))
        above = depth >= 6 and width >= 128  # the ancestry is 6 x 128
        free = best([(f"probe-{m}", m) for m in BASELINES], size)
        cells = [free and f"{free[1]} {free[0]:.1f}" or "…"]
        for rows in (half, twentieth):
            gene = best(rows, size)
            cells.append(gene and f"{gene[1]} {gene[0]:.1f}" or "…")
            if free and gene:
                gap = gene[0] - free[0]
                met = gap >= (-0.5 if above else 0.0)
                cells.append(f"{'met' if met else 'not met'} ({gap:+.1f})")
            else:
                cells.append("…")
        lines.append(f"| {size.replace('x', ' x ')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + ("\n\nThe aims of issue 19: at or above the best training-free method below the "
                              "ancestry's size, within 0.5 points at or above it (gap in points).\n")


def fill_docs(text: str, docs: Path) -> None:
    """Put the report's tables in docs/learngenes.md between its markers,
    with only the sizes measured so far."""
    tables = text.split("\n\n")
    budget = tables[0].splitlines()
    columns = [[cell.strip() for cell in line.strip("|").split("|")] for line in budget]
    keep = [i for i in range(len(columns[0]))
            if i < 3 or any(row[i] not in ("…", "n/a") for row in columns[2:])]
    measured = [row for index, row in enumerate(columns)
                if index < 2 or any(row[i] not in ("…", "n/a") for i in keep[3:])]
    shown = ["| " + " | ".join(row[i] for i in keep) + " |" for row in measured]
    body = "\n".join(shown) + "\n\n" + tables[1] + "\n\n" + tables[2] + "\n\n" + tables[3]
    page = docs.read_text()
    start, end = "<!-- table -->\n", "<!-- /table -->"
    head, rest = page.split(start, 1)
    tail = rest.split(end, 1)[1]
    docs.write_text(head + start + body.rstrip() + "\n" + end + tail)


def _figure(saved: dict, path: Path, sizes: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(13, 7), sharex=True)
    series: dict[tuple[str, str], list] = {}
    for gene in learngenes():
        condensed = saved.get(f"condense-{gene['name']}")
        if not condensed or condensed.get("status") != "done":
            continue
        label = f"{gene['kind']} ({gene['init']} start" if gene["init"] != "sampled" else f"{gene['kind']} (sampled"
        label += ("" if gene["lr"] == 1e-3 else f", lr {gene['lr']:g}") + (
            f", --until {gene['until']:g}" if gene.get("until") else "") + (
            f", batch {gene['batch']}" if gene.get("batch", 64) != 64 else "") + ")"
        for size in sizes:
            result = saved.get(f"probe-{gene['kind']}:{gene['name']}@{size}")
            if result and result.get("status") == "done":
                # (steps, seconds, top-1): a line follows the budget, plotted at its seconds
                series.setdefault((label, size), []).append(
                    (gene["steps"], condensed["wall_seconds"], result["row"]["final"]["top1"]))
    # One colour per learngene series in every panel.
    labels = sorted({label for label, _ in series})
    colours = {label: plt.get_cmap("tab20")(i % 20) for i, label in enumerate(labels)}
    for axis, size in zip(axes.flat, sizes):
        best = max(((saved[f"probe-{m}@{size}"]["row"]["final"]["top1"], m) for m in BASELINES
                    if saved.get(f"probe-{m}@{size}", {}).get("status") == "done"), default=None)
        if best:
            axis.axhline(best[0], color="black", linestyle="--", linewidth=0.8, label=f"best training-free ({best[1]})")
        random = saved.get(f"probe-random@{size}", {}).get("row")
        if random:
            axis.axhline(random["final"]["top1"], color="grey", linestyle=":", linewidth=0.8, label="random init")
        for (label, where), points in sorted(series.items()):
            if where == size:
                points.sort()
                axis.plot([p[1] for p in points], [p[2] for p in points], marker="o", label=label,
                          color=colours[label])
        if not any(where == size for _, where in series) and not best:
            axis.text(0.5, 0.5, "not measured yet", ha="center", va="center", transform=axis.transAxes)
        axis.set_xscale("log")
        axis.set_title(size.replace("x", " x "))
        axis.set_ylabel("top-1 % after 300 steps")
        axis.set_xlabel("condense seconds (2-core CPU)")
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=6)
    figure.suptitle("Learngenes by condense cost, against the best training-free method (example ancestry, Fashion-MNIST)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "one", "status", "report"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--docs", type=Path, help="report: also fill this page's table between <!-- table --> markers")
    args = parser.parse_args()
    results = args.out / "results"
    results.mkdir(parents=True, exist_ok=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.command == "one":
        state = run_one(results, args.cache)
        return {"ran": 0, "wait": 3, "done": 4}[state]
    if args.command == "run":
        children = [subprocess.Popen([sys.executable, __file__, "worker", "--out", str(args.out), "--cache",
                                      str(args.cache)]) for _ in range(args.workers)] if args.workers > 1 else []
        if not children:
            worker(args.out, args.cache)
        for child in children:
            child.wait()
        return 0
    if args.command == "status":
        for job in jobs():
            path = result_path(results, job.name)
            state = json.loads(path.read_text())["status"] if path.exists() else (
                "running" if path.with_suffix(".lock").exists() else "")
            print(f"{state:8} {job.name}")
        return 0
    text = report(args.out)
    (args.out.parent / "learngene_budget.md").write_text(text)
    if args.docs:
        fill_docs(text, args.docs)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        parser = argparse.ArgumentParser()
        parser.add_argument("command")
        parser.add_argument("--out", type=Path)
        parser.add_argument("--cache", type=Path)
        a = parser.parse_args()
        worker(a.out, a.cache)
        sys.exit(0)
    sys.exit(main())
