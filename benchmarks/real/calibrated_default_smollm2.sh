#!/usr/bin/env bash
# lg shrink's default with calibration data (block ablation to the depth, then
# activation importance to the width: docs/methods.md "Without --method") on
# the real SmolLM2-135M-Instruct, 30 x 576 -> 20 x 384 (heads 6, kv 2,
# MLP 1024), against weight selection and activation importance alone (the
# first 20 layers), training-free: held-out perplexity of 8 x 256 tokens of
# King James text (smollm2_perplexity.py). On the 2-core CPU; the calibration
# uses 32 windows of 128 tokens of calibrate.txt. Rows are appended to
# benchmarks/real/calibrated_default_smollm2.jsonl, each model's shrink time
# to its .log, each `lg shrink --json` report to its .json (stored gzipped:
# the report lists every kept index).
#
# Run 2026-11-27 on the 2-core CPU (28 minutes, 1,677 s of it the greedy
# block ablation's 10 rounds): original 19.2, select 1.5 x 10^5,
# activation alone 4.0 x 10^9, block-ablation then activation 1,013.
#
#   bash benchmarks/real/calibrated_default_smollm2.sh     (after fetch.py --only smollm2,kjv)
set -euo pipefail
C=${C:-$HOME/.cache/lg-real}
W=${W:-/tmp/calibrated-default}
PY=${PY:-python3}
OUT=benchmarks/real/calibrated_default_smollm2
mkdir -p "$W" "$OUT"
CAL=(--calibrate "$C/kjv/calibrate.txt" --calibrate-samples 32)
shrink() {  # NAME, then lg shrink options
  local name=$1; shift
  [ -d "$W/$name" ] && return 0
  local started=$SECONDS
  $PY -m lgcli shrink "$C/smollm2-135m" --depth 20 --width 384 "$@" -o "$W/$name" --json \
    > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "$name: $((SECONDS - started)) s" >> "$OUT/$name.log"
}
shrink select --method select
shrink activation --method activation "${CAL[@]}"
shrink default "${CAL[@]}"          # no --method: block-ablation, then activation
$PY benchmarks/real/smollm2_perplexity.py original="$C/smollm2-135m" select="$W/select" \
  activation="$W/activation" block-ablation+activation="$W/default" \
  --results benchmarks/real/calibrated_default_smollm2.jsonl --device cpu
