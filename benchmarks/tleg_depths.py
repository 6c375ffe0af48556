"""TLEG's descendants at several depths, condensed at the paper's fixed
auxiliary depth or with `--depths` (a depth drawn per step): step-0 top-1 of
each descendant, no fine-tuning, on 2,000 official Fashion-MNIST test images.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/tleg_depths.py tleg 600 "{}"
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/tleg_depths.py tleg 600 "{'depths': '2-12'}"

Arguments: the kind, the condense steps (batch 128, lr 1e-3), and the kind's
options as a Python dict. Figures in docs/learngenes.md ("Choices").
"""
import ast, sys, time, torch
torch.set_num_threads(2)
from lgcli.condense import CondenseSettings, condense
from lgcli.data import load_data
from lgcli.api import save_learngene
from lgcli.resize import expand
from lgcli.arch import get_adapter
from lgcli.accuracy import evaluate_accuracy
method = sys.argv[1]; steps = int(sys.argv[2]); extra = ast.literal_eval(sys.argv[3]) if len(sys.argv) > 3 else {}
data = load_data("fashion-mnist", seed=0, test_subset=2000)
t = time.time()
gene, ck, rep = condense("examples/fmnist_vit.safetensors", data, method=method, settings=CondenseSettings(steps=steps, batch_size=128, lr=float(extra.pop("lr", 1e-3))), options=extra, notify=print)
print("condense", time.time()-t, rep["accuracy"], rep["teacher_accuracy"], rep["loss_first"], rep["loss_last"])
save_learngene(f"/tmp/{method}.lg.safetensors", gene, force=True)
ad = get_adapter("vit")
for d in (2, 3, 4, 6, 9, 12):
    spec, stack, r = expand(gene, depth=d, notify=lambda m: None)
    m = ad.load_model(spec, stack)
    print(d, evaluate_accuracy(m, data.test)["top1"])
