#!/usr/bin/env bash
# One device call (15 minutes of device time: about LIMIT + 1.5 minutes here)
# for issue 30's real-weight aim, on the real DINOv2-S classifier carried in
# .gpu4 (unpack_carried.sh): gpu_width_study.sh at 12 x 192, 6 x 192 and
# 3 x 192, budgets 0, 500 and 2,000 steps of 256, seeds 0 and 1.
#
# Two calls ran (2026-11-27, two sessions; width_study/results.jsonl): SWS and
# TLEG trained at widths 192 and 384 end 4-6 points under weight selection
# distilled for the same 500 steps. This call measures first what the
# example ancestry says can close that gap (benchmarks/learngene_distill/):
# SWS with a stage per layer ("sws-widths-unshared": its default 5 stages give
# a 12-layer descendant 5 distinct blocks, the example's 6-layer one 5 of 6),
# the SWS learngenes' descendants healed by lg distill for the same steps
# ("+ distill"), beside the data-aware resizes distilled; then
# BoT, WAVE, TLEG and LeTs. Every learngene at 500 steps only: a 2,000-step
# sandwich condense takes 440 s of a call beside the rest and was cut twice,
# so those rows need a call of their own. A learngene condensed by an
# earlier call stayed on its machine: a grow still missing condenses it again.
#
# Beside it, gpu_budgets.sh's b1500 group (issue 28: the classifier at budget
# 1,500, three seeds, 6 x 384 and 12 x 192, one process per method).
#
#   call (carry .gpu4):  LIMIT=480 bash benchmarks/real/gpu_real_aims.sh
set -uo pipefail
export PYTHONPATH=$PWD
source benchmarks/real/unpack_carried.sh
export LIMIT=${LIMIT:-480}
OUT=${OUT:-/tmp/lg-gpu-out}
mkdir -p "$OUT"
PARTS=${BESIDE:-b1500} bash benchmarks/real/gpu_budgets.sh > "$OUT/beside.txt" 2>&1 &
SIZES=12x192,6x192,3x192 BUDGETS=0,500,2000 SEEDS=${SEEDS:-0,1} WORKERS=${WORKERS:-10} \
  STUDY_ARGS="--kinds sws-widths-unshared,sws-widths,tleg-widths,tleg,wave-widths,lets
              --distill-kinds sws-widths,sws-widths-unshared
              --kind-budgets tleg=500,wave-widths=500,lets=500,tleg-widths=500,sws-widths=500,sws-widths-unshared=500
              --order sws-widths-unshared,sws-widths+distill,sws-widths-unshared+distill,sws-widths,data-aware,select,bot,wave-widths,tleg-widths,tleg,lets
              --results-from benchmarks/real/width_study/results.jsonl" \
  bash benchmarks/real/gpu_width_study.sh
wait
cat "$OUT/beside.txt"
