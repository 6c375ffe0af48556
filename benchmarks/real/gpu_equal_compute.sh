#!/usr/bin/env bash
# One prepared device call (about 7 minutes on an H200; everything in parallel
# on the one GPU, each process cut at LIMIT seconds, every bench cell saved
# as it lands, so a cut run keeps what finished, seed by seed).
#
# Only a few files come back from a call (and none whose names hold '@' or
# '~', as bench cells' do), so everything is written under /tmp/eq there and
# packed into $OUT/equal_compute.tgz when the processes end; the tables are
# also printed.
#
# 1. Issue 31: the real DINOv2-S classifier (.gpu3/dinov2-s-fmnist, float16)
#    benched at budget 0 with three seeds under its own preprocessing
#    (ImageNet mean/std, bicubic: read from preprocessor_config.json) and under
#    lg's old default (mean = std = 0.5, bilinear), at 6 x 384 (select, block
#    influence, angular) and 12 x 192 (select, activation), random beside them.
# 2. Issue 28: the same sizes at equal compute, budget 300 (each resize
#    distilled from the classifier for 300 steps, a TLEG learngene condensed
#    for 300), three seeds, own preprocessing.
# 3. Issue 28: SmolLM2-135M, 30 -> 20 layers by angular distance, distilled to
#    3,000 steps (the curve at 0, 100, 300, 1,000, 2,000, 3,000) when an
#    earlier call left the converted model in /tmp/real/smollm2-135m
#    (gpu_smollm2_prepare.sh).
#
#   LIMIT=420 bash benchmarks/real/gpu_equal_compute.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD OMP_NUM_THREADS=2
OUT=${OUT:-/tmp/lg-gpu-out}
WORK=${WORK:-/tmp/eq}
mkdir -p "$OUT" "$WORK"
LIMIT=${LIMIT:-420}
M=.gpu3/dinov2-s-fmnist
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$WORK/device.txt"

bench() {  # NAME, then lg bench options
  local name=$1; shift
  local started=$SECONDS
  timeout "$LIMIT" python3 -m lgcli bench $M --data fashion-mnist-mini --steps 200 --eval-every 50 --seeds 3 \
    --calibrate-samples 256 --device "${DEVICE:-cuda}" -o "$WORK/$name" --markdown "$@" > "$WORK/$name.md" 2> "$WORK/$name.log"
  echo "$name: exit $? after $((SECONDS - started)) s" >> "$WORK/status.txt"
}
OLD_DEFAULT=(--mean 0.5 --std 0.5 --interpolation bilinear)
bench own-b0-6x384 --sizes 6x384 --methods select,block-influence,angular --budget 0 &
bench own-b0-12x192 --sizes 12x192 --methods select,activation --budget 0 &
bench half-b0-6x384 --sizes 6x384 --methods select,block-influence,angular --budget 0 "${OLD_DEFAULT[@]}" &
bench half-b0-12x192 --sizes 12x192 --methods select,activation --budget 0 "${OLD_DEFAULT[@]}" &
bench own-b300-6x384 --sizes 6x384 --methods select,block-influence,angular,tleg --budget 300 &
bench own-b300-12x192 --sizes 12x192 --methods select,activation,tleg --budget 300 &
if [ -d /tmp/real/smollm2-135m ]; then
  (started=$SECONDS
   timeout "$LIMIT" python3 benchmarks/real/smollm2_study.py --source /tmp/real/smollm2-135m --kjv /tmp/kjv \
     --work /tmp/smolwork --results "$WORK/smollm2_long.jsonl" --device cuda --report-at 0,100,300 \
     --long angular --long-steps 3000 --long-report-at 1000,2000,3000 --only angular-d20+distill3000 \
     > "$WORK/smollm2_long.log" 2>&1
   echo "smollm2 angular 3000: exit $? after $((SECONDS - started)) s" >> "$WORK/status.txt") &
fi
wait
tar czf "$OUT/equal_compute.tgz" -C "$WORK" .
cat "$WORK/status.txt"
for f in "$WORK"/*.md; do echo "== $f"; cat "$f"; done
grep '"step"' "$WORK/smollm2_long.log" 2>/dev/null
