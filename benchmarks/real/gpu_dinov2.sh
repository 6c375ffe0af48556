#!/usr/bin/env bash
# The real DINOv2-S classifier (benchmarks/real/fetch.py's dinov2-s-fmnist,
# carried in float16 as .gpu3/dinov2-s-fmnist) on a lent GPU, about 5 minutes
# on an H200: lg bench with three seeds at budgets 0 and 300 (every resize
# distilled from the classifier for 300 steps), depth 12 -> 6 (select against
# block influence and angular distance) and width 384 -> 192 (select against
# activation importance), on fashion-mnist-mini (4,000 train, 1,000 test
# images: the full set does not fit beside the weights in one call).
# Each bench folder is packed into $OUT when its run ends, or is cut off.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/lg-gpu-out}
mkdir -p "$OUT"
M=.gpu3/dinov2-s-fmnist
LIMIT=${LIMIT:-60}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for budget in 0 300; do
  for case in "6x384 select,block-influence,angular" "12x192 select,activation"; do
    set -- $case
    dir=/tmp/bench-$1-b$budget
    timeout "$LIMIT" python3 -m lgcli bench $M --data fashion-mnist-mini --sizes "$1" --methods "$2" --steps 200 --eval-every 50 \
      --seeds 3 --budget $budget --calibrate-samples 256 --device cuda -o "$dir" --markdown \
      > "$dir.md" 2> "$dir.log"
    echo "bench $1 budget $budget: exit $?"; tail -3 "$dir.log"
  done
done
tar czf "$OUT/dinov2_benches.tgz" /tmp/bench-* 2>/dev/null
cat /tmp/bench-*.md
