#!/usr/bin/env bash
# Which `lg grow` method keeps a real language model when nothing is trained:
# SmolLM2-135M-Instruct (benchmarks/real/fetch.py's smollm2-135m, 30 x 576,
# 9 heads / 3 key/value heads, MLP 1536, tied head) grown in depth (40
# layers) and in width (768: 12 heads / 4 kv, MLP 2048, no whole multiple of
# 576; 1152: a whole multiple), held-out perplexity on King James text
# (benchmarks/real/smollm2_perplexity.py: 8 x 256 tokens of kjv/test.txt).
# Rows appended to benchmarks/real/grow_smollm2.jsonl.
#
#   OMP_NUM_THREADS=2 nice bash benchmarks/real/grow_smollm2.sh
set -euo pipefail
C=${LG_REAL_CACHE:-$HOME/.cache/lg-real}
WORK=${WORK:-/tmp/lg-grow-smollm2}
RESULTS=${RESULTS:-benchmarks/real/grow_smollm2.jsonl}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
rows=("original=$C/smollm2-135m")
grow() {  # NAME, then lg grow options
  local name=$1; shift
  [ -d "$WORK/$name" ] || $PY -m lgcli grow "$C/smollm2-135m" "$@" -o "$WORK/$name" 2>/dev/null
  rows+=("$name=$WORK/$name")
}
for method in clone identity-insert depth-upscale auto-lg; do grow "$method-40x576" --depth 40 --method "$method"; done
for method in clone auto-lg bot; do grow "$method-30x768" --width 768 --method "$method"; done
grow clone-30x1152 --width 1152 --method clone
$PY benchmarks/real/smollm2_perplexity.py "${rows[@]}" --results "$RESULTS"
