#!/usr/bin/env bash
# The example ancestry at equal compute, budget 6,000 (issue 28): docs/bench.md's
# protocol of the budget-0, 300 and 1,500 tables, on the development CPU. Two
# lg bench processes of one thread each (the 64-wide sizes; the 128-wide ones,
# with TLEG), each cell saved as it lands, so a rerun of this script resumes
# where a session's end stopped it (a cell cut mid-distillation starts again).
# About 5 minutes a 64-wide cell and 13 a 128-wide one on the 2 shared cores:
# some 12 hours in all. On a device: LIMIT=480 PARTS=example6000 bash
# benchmarks/real/gpu_budgets.sh.
#
#   run or resume:  ROOT=/tmp/exb6000 setsid nohup bash benchmarks/bench_fmnist_budget6000_cpu.sh &
#   beside work on lg, from a copy of the code that edits cannot reach (a run
#   that imports lgcli lazily from a tree being edited can fail mid-way; one did):
#     git clone -q . /tmp/lg-frozen && ln -s "$PWD/.venv" /tmp/lg-frozen/.venv && cd /tmp/lg-frozen &&
#     PYTHONPATH=/tmp/lg-frozen ROOT=/tmp/exb6000 setsid nohup bash benchmarks/bench_fmnist_budget6000_cpu.sh &
#   pause (for CI): pkill -STOP -f "budget 6000"   and after: pkill -CONT -f "budget 6000"
#   when both say "exit 0" in ROOT/status.txt: cp -rn ROOT/w64/. ROOT/all; cp -rn ROOT/w128/. ROOT/all,
#   then the bench once more with -o ROOT/all and every size (all 90 cells reused) prints one table.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-/tmp/exb6000}
mkdir -p "$ROOT"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
METHODS=bot,select,auto-lg,clone,block-ablation,activation,tleg,random
run() { local name=$1 sizes=$2 methods=$3
  nice -n 5 .venv/bin/lg bench examples/fmnist_vit.safetensors --data fashion-mnist --test-subset 2000 \
    --sizes "$sizes" --steps 300 --lr-sweep 3e-4,1e-3 --eval-every 30 --seeds 3 --budget 6000 \
    --methods "$methods" -o "$ROOT/$name" --markdown > "$ROOT/$name.md" 2>> "$ROOT/$name.log"
  echo "$name exit $? $(date +%T)" >> "$ROOT/status.txt"; }
echo "start $(date +%T)" >> "$ROOT/status.txt"
# TLEG builds only its own width (128): the 64-wide process leaves it out.
# PARTS=w128 (the half still to measure) runs the 128-wide sizes as two
# processes of four methods each (TLEG condensed once, in the second);
# their cells merge into ROOT/all as above.
case "${PARTS:-w64,w128}" in
  w128) run w128a 3x128,8x128 bot,select,auto-lg,clone &
        run w128b 3x128,8x128 block-ablation,activation,tleg,random & wait ;;
  *) run w64 3x64,6x64 "${METHODS/,tleg/}" & run w128 3x128,8x128 "$METHODS" & wait ;;
esac
