#!/usr/bin/env bash
# Issue 30's study on real weights in one device call (about LIMIT + 1
# minutes on one H200): the real DINOv2-S classifier (.gpu3/dinov2-s-fmnist,
# float16: README.md "Device runs") at 6 x 384, 12 x 192, 6 x 192 and
# 3 x 192; TLEG, WAVE and SWS condensed at widths 192 and 384 at once (the
# sandwich rule), LeTs, and today's single-width TLEG, beside select, BoT and
# the data-aware resizes (block ablation, then activation importance), each
# with and without lg distill for the same steps, at budgets 0, 500 and
# 2,000 steps of 256, one seed (a second call with SEEDS=1 adds one; the
# results are resumed from WORK while the machine is warm).
# benchmarks/real/width_study.py runs the jobs WORKERS at a time, writes each
# result as it lands and stops what still runs at LIMIT seconds.
#
#   call (carry .gpu4):  LIMIT=420 bash benchmarks/real/gpu_width_study.sh
#   which paths, in which order a cut run finishes them (width_study.py --help):
#                        STUDY_ARGS="--kinds sws-widths,tleg --order sws-widths,select" ...
#   smoke test on CPU:   DEVICE=cpu SMOKE=--smoke LIMIT=900 WORKERS=2 SIZES=3x192 BUDGETS=0,1 \
#                        M=~/.cache/lg-real/dinov2-s-fmnist bash benchmarks/real/gpu_width_study.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
source benchmarks/real/unpack_carried.sh
OUT=${OUT:-/tmp/lg-gpu-out}
WORK=${WORK:-/tmp/width-study}
mkdir -p "$OUT" "$WORK"
(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: ${DEVICE:-cuda}") \
  | tee "$WORK/device.txt"
python3 benchmarks/real/width_study.py run ${SMOKE:-} --ancestry "${M:-.gpu3/dinov2-s-fmnist}" \
  --device "${DEVICE:-cuda}" --sizes "${SIZES:-6x384,12x192,6x192,3x192}" --widths 192,384 \
  --budgets "${BUDGETS:-0,500,2000}" --seeds "${SEEDS:-0}" --workers "${WORKERS:-10}" \
  --deadline "${LIMIT:-420}" --work "$WORK" ${STUDY_ARGS:-} 2> "$WORK/run.log"
python3 benchmarks/real/width_study.py report --work "$WORK" | tee "$WORK/width_study.md"
tail -5 "$WORK/run.log"
# Models stay behind (tens of MB each); results, logs and the table come back.
tar czf "$OUT/width_study.tgz" --exclude=models -C "$WORK" .
