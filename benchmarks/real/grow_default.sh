#!/usr/bin/env bash
# Which `lg grow` method keeps most of a real model when nothing is trained:
# the real DINOv2-S Fashion-MNIST classifier (benchmarks/real/fetch.py's
# dinov2-s-fmnist, 12 x 384, 86.35 % as it is) grown in width (12 x 768,
# 12 heads: a whole multiple; 12 x 512, 8 heads: none, where clone pads the
# residual width) and in depth (18 x 384) by each method, scored by `lg eval`
# at step 0 on the first 1,000 Fashion-MNIST test images under the model's
# own preprocessing. One JSON line per row in benchmarks/real/grow_default.jsonl.
#
#   OMP_NUM_THREADS=2 nice bash benchmarks/real/grow_default.sh
set -euo pipefail
C=${LG_REAL_CACHE:-$HOME/.cache/lg-real}
WORK=${WORK:-/tmp/lg-grow-default}
RESULTS=${RESULTS:-benchmarks/real/grow_default.jsonl}
mkdir -p "$WORK"
PY=${PYTHON:-python3}
row() {  # NAME, then lg grow options
  local name=$1; shift
  grep -q "\"row\": \"$name\"" "$RESULTS" 2>/dev/null && return 0
  local started=$SECONDS
  $PY -m lgcli grow "$C/dinov2-s-fmnist" "$@" -o "$WORK/$name" --force 2>/dev/null
  local grown=$((SECONDS - started))
  $PY -m lgcli eval "$WORK/$name" --data fashion-mnist --steps 0 --test-subset 1000 --json 2>/dev/null |
    $PY -c "import json, sys; r = json.load(sys.stdin)['rows'][0]
print(json.dumps({'row': '$name', 'options': '$*', 'grow_seconds': $grown, 'architecture': r['architecture'],
                  'top1': r['instinct']['top1'], 'loss': r['instinct']['loss'], 'test_images': 1000}))" >> "$RESULTS"
  tail -1 "$RESULTS" | cut -c1-200
}
row original --depth 12  # lg grow to its own size: the model as it is (a copy)
for method in clone auto-lg bot heur-lg; do row "$method-12x768" --width 768 --heads 12 --method "$method"; done
for method in clone auto-lg bot; do row "$method-12x512" --width 512 --heads 8 --method "$method"; done
# (stack reaches whole multiples of the depth only: 24, not 18)
for method in clone auto-lg heur-lg identity-insert depth-upscale; do row "$method-18x384" --depth 18 --method "$method"; done
