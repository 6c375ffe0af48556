"""Peak memory of the issue-20 item-5 inputs, side by side in one run under
two checkouts: a 144-byte stream on stdin whose header claims 4 GB, and a
model folder with twelve sparse 250 MB files in 1_Pooling/, against a plain
`lg inspect` of the same folder (peak RSS of each `lg` process).

    .venv/bin/python benchmarks/hostile_memory.py BEFORE_CHECKOUT [AFTER_CHECKOUT]

e.g. `git worktree add /tmp/old-lg afd129d` first. Writes nothing but a
scratch folder in /tmp (removed at the start of the next run)."""
import json, os, resource, struct, subprocess, sys, shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
work = Path("/tmp/peakwork"); shutil.rmtree(work, ignore_errors=True); work.mkdir()
header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 30], "data_offsets": [0, 4 << 30]}}).encode()
header += b" " * (-len(header) % 8)
stream = struct.pack("<Q", len(header)) + header
stream += b"\0" * (144 - len(stream))
(work / "claim.safetensors").write_bytes(stream)
from text_models import make_model, save_folder
g = save_folder(make_model("gpt2-lm"), work / "gpt2", "gpt2-lm")
bomb = work / "bomb"; shutil.copytree(g, bomb); (bomb / "1_Pooling").mkdir()
for i in range(12):
    with open(bomb / "1_Pooling" / f"part{i}.json", "wb") as h: h.truncate(250 << 20)
code = ("import resource, sys\nfrom lgcli.cli import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit as exc:\n    code = exc.code or 0\n"
        "print('RESULT', code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.__stderr__)")
def peak(repo, args, stdin=None):
    env = {**os.environ, "PYTHONPATH": repo}
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as f:
        d = subprocess.run([sys.executable, "-c", code, *map(str, args)], stdin=f, capture_output=True, text=True, env=env, cwd=work)
    line = [l for l in d.stderr.splitlines() if l.startswith("RESULT")][-1].split()
    msg = [l for l in d.stderr.splitlines() if l.startswith("lg:")]
    return int(line[1]), int(line[2]) / 1024, (msg[-1][:110] if msg else "")
checkouts = [(f"before ({sys.argv[1]})", sys.argv[1]), ("after", sys.argv[2] if len(sys.argv) > 2 else str(HERE.parent))]
for label, repo in checkouts:
    base = peak(repo, ["inspect", work / "gpt2"])
    s = peak(repo, ["inspect", "-"], stdin=work / "claim.safetensors")
    b = peak(repo, ["shrink", bomb, "--depth", "1", "-o", work / f"out-{label[:5]}"])
    shutil.rmtree(work / f"out-{label[:5]}", ignore_errors=True)
    print(f"{label}: plain inspect {base[1]:.0f} MB; 144-byte stream {s[1]:.0f} MB (exit {s[0]}: {s[2]}); companion bomb {b[1]:.0f} MB (exit {b[0]}: {b[2]})")
