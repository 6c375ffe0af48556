#!/usr/bin/env bash
# One device call (15 minutes of device time: about LIMIT + 1.5 minutes here)
# for issue 30's real-weight aim, on the real DINOv2-S classifier carried in
# .gpu4 (unpack_carried.sh): gpu_width_study.sh at 12 x 192, 6 x 192 and
# 3 x 192, budgets 0, 500 and 2,000 steps of 256, seeds 0 and 1.
#
# The width-trained SWS and TLEG learngenes (sandwich rule, widths 192 and
# 384) at 500 and 2,000; today's single-width TLEG, WAVE and LeTs at 500
# only; select, the data-aware resizes and BoT, each distilled for the same
# steps. The study starts from what earlier calls measured
# (width_study/results.jsonl: seed 0 of most paths, 2026-11-27) and runs what
# is missing, in the order the aim compares the paths (SWS and TLEG widths
# against select and the data-aware resizes first), so a run cut at LIMIT
# keeps those. A learngene condensed by an earlier call stayed on its machine:
# a grow still missing condenses it again.
#
# Beside it, gpu_budgets.sh's ablation group (issue 28's DINOv2 12 -> 6 aim:
# block ablation against select, budgets 0 and 300, three seeds). Its first
# run (ablation_6x384/) distilled on lg's default preprocessing, a bug since
# fixed: its budget-300 cells, and the study's distilled rows (moved to
# width_study/results_distill_on_default_preprocessing.jsonl), run again.
#
#   call (carry .gpu4):  LIMIT=480 bash benchmarks/real/gpu_real_aims.sh
set -uo pipefail
export PYTHONPATH=$PWD
source benchmarks/real/unpack_carried.sh
export LIMIT=${LIMIT:-480}
OUT=${OUT:-/tmp/lg-gpu-out}
mkdir -p "$OUT"
PARTS=ablation bash benchmarks/real/gpu_budgets.sh > "$OUT/ablation.txt" 2>&1 &
SIZES=12x192,6x192,3x192 BUDGETS=0,500,2000 SEEDS=${SEEDS:-0,1} WORKERS=${WORKERS:-12} \
  STUDY_ARGS="--kinds sws-widths,tleg-widths,tleg,wave-widths,lets
              --kind-budgets tleg=500,wave-widths=500,lets=500
              --order sws-widths,tleg-widths,select,data-aware,bot,wave-widths,tleg,lets
              --results-from benchmarks/real/width_study/results.jsonl" \
  bash benchmarks/real/gpu_width_study.sh
wait
cat "$OUT/ablation.txt"
