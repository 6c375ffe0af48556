#!/usr/bin/env bash
# The next device call for issue 28's open aims, prepared on the CPU (its
# mechanics checked there with tiny budgets: DEVICE=cpu SMOKE=1). About
# LIMIT + 1 minute on one H200: every process runs in parallel on the one GPU,
# is cut at LIMIT seconds, and saves each bench cell as it lands, so a cut run
# keeps what finished and a second call with the same WORK folder resumes it.
#
# 1. Block ablation (greedy, lg's default) against select on the real DINOv2-S
#    classifier, 12 -> 6 layers, budgets 0 and 300, three seeds, its own
#    preprocessing: the aim "data-aware at or above select" that block
#    influence and angular missed.
# 2. Budget 1,500 (each resize distilled from the classifier for 1,500 steps,
#    TLEG condensed for 1,500), three seeds: 6 x 384 (select, block-ablation,
#    tleg) and 12 x 192 (select, activation; TLEG builds only its own width), one
#    process per method.
# 3. The example ancestry (examples/fmnist_vit.safetensors, 6 x 128) at
#    budget 1,500, three seeds, at 3 x 64, 6 x 64, 3 x 128 and 8 x 128, one
#    process per size, with the protocol and methods of docs/bench.md's
#    budget-0 and budget-300 tables (measured on the CPU), so the three
#    budgets compare cell for cell.
# Each group's per-method (or per-size) folders are then copied into one and
# the bench rerun there: every cell is reused, so it only prints the one table
# with intervals and verdicts.
#
# Only a few files come back from a call, none with '@' or '~' in its name (as
# bench cells have), so everything is written under WORK and packed into
# $OUT/budgets.tgz; the tables are printed too.
#
#   call (carry .gpu4, the float16 classifier: see README.md "Device runs"):
#     LIMIT=450 bash benchmarks/real/gpu_budgets.sh
#   some groups only (beside another study in the same call):
#     LIMIT=450 PARTS=ablation bash benchmarks/real/gpu_budgets.sh   # of ablation, b1500, example,
#                                                                       example6000 (not in the default)
#   smoke test here:  DEVICE=cpu SMOKE=1 LIMIT=300 WORK=/tmp/budgets-smoke OUT=/tmp/budgets-out \
#                     M=/path/to/tiny-vit-classifier bash benchmarks/real/gpu_budgets.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
source benchmarks/real/unpack_carried.sh
OUT=${OUT:-/tmp/lg-gpu-out}
WORK=${WORK:-/tmp/budgets}
LIMIT=${LIMIT:-450}
DEVICE=${DEVICE:-cuda}
M=${M:-.gpu3/dinov2-s-fmnist}
PARTS=",${PARTS:-ablation,b1500,example},"
part() { [[ $PARTS == *",$1,"* ]]; }
DEPTH_SIZE=${DEPTH_SIZE:-6x384}   # the classifier's sizes (the smoke test's tiny model has others)
WIDTH_SIZE=${WIDTH_SIZE:-12x192}
EXAMPLE=examples/fmnist_vit.safetensors
mkdir -p "$OUT" "$WORK"
# A later call goes on from an earlier one's cells: FROM=its budgets.tgz (carried), unpacked into WORK.
[ -n "${FROM:-}" ] && [ -f "$FROM" ] && tar xzf "$FROM" -C "$WORK"
echo "== call of $(date -u +%FT%TZ), PARTS=$PARTS" >> "$WORK/status.txt"
(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: $DEVICE") > "$WORK/device.txt"

# The budgets, shrunk for a smoke test of the script's mechanics.
if [ -n "${SMOKE:-}" ]; then B300=2; B1500=3; B6000=4; CAL=8; PROBE=(--steps 2 --eval-every 1 --test-subset 64 --subset 256)
else B300=300; B1500=1500; B6000=6000; CAL=256; PROBE=(--steps 200 --eval-every 50); fi
REAL=("${PROBE[@]}" --data fashion-mnist-mini --seeds 3 --calibrate-samples "$CAL" --device "$DEVICE")
# docs/bench.md's protocol for the example (its budgets 0 and 300 ran on the CPU with it).
if [ -n "${SMOKE:-}" ]; then EXAMPLE_PROBE=("${PROBE[@]}" --data fashion-mnist-mini)
else EXAMPLE_PROBE=(--data fashion-mnist --test-subset 2000 --steps 300 --lr-sweep 3e-4,1e-3 --eval-every 30); fi
EXAMPLE_ARGS=("${EXAMPLE_PROBE[@]}" --seeds 3 --device "$DEVICE")

bench() {  # NAME SOURCE, then lg bench options
  local name=$1 source=$2; shift 2
  local started=$SECONDS
  timeout "$LIMIT" python3 -m lgcli bench "$source" -o "$WORK/$name" --markdown "$@" \
    > "$WORK/$name.md" 2> "$WORK/$name.log"
  echo "$name: exit $? after $((SECONDS - started)) s" >> "$WORK/status.txt"
}

# 1. Block ablation against select, budgets 0 and 300.
part ablation && bench abl-b0-$DEPTH_SIZE "$M" "${REAL[@]}" --sizes $DEPTH_SIZE --methods select,block-ablation --budget 0 &
part ablation && bench abl-b300-$DEPTH_SIZE "$M" "${REAL[@]}" --sizes $DEPTH_SIZE --methods select,block-ablation --budget "$B300" &
# 2. Budget 1,500 on the real classifier, one process per method.
for method in select block-ablation tleg; do
  part b1500 && bench "b1500-$DEPTH_SIZE-$method" "$M" "${REAL[@]}" --sizes $DEPTH_SIZE --methods "$method" --budget "$B1500" &
done
# (TLEG builds only its own width: at 12 x 192 it is n/a, and condensing it there would only cost time.)
for method in select activation; do
  part b1500 && bench "b1500-$WIDTH_SIZE-$method" "$M" "${REAL[@]}" --sizes $WIDTH_SIZE --methods "$method" --budget "$B1500" &
done
# 3. The example ancestry, one process per size, budget 1,500.
EXAMPLE_METHODS=${EXAMPLE_METHODS:-bot,select,auto-lg,clone,block-ablation,activation,tleg,random}
# TLEG builds only the ancestry's width, 128: the 64-wide sizes leave it out (their assembled
# cells are n/a, from the learngene the 128-wide processes condensed).
for size in 3x64 6x64 3x128 8x128; do
  methods=$EXAMPLE_METHODS
  [ "${size#*x}" = 64 ] && methods=${EXAMPLE_METHODS/,tleg/}
  part example && bench "ex-b1500-$size" "$EXAMPLE" "${EXAMPLE_ARGS[@]}" --sizes "$size" --methods "$methods" \
    --budget "$B1500" &
done
# 4. The example ancestry at budget 6,000 (about 12 hours on the development CPU): one process
# per size and method, at most PARALLEL at once (the machine's cores), each cell saved as it lands.
PARALLEL=${PARALLEL:-16}
if part example6000; then
  for size in 3x64 6x64 3x128 8x128; do
    for method in ${EXAMPLE_METHODS//,/ }; do
      [ "${size#*x}" = 64 ] && [ "$method" = tleg ] && continue
      bench "ex-b6000-$size-$method" "$EXAMPLE" "${EXAMPLE_ARGS[@]}" --sizes "$size" --methods "$method" \
        --budget "$B6000" &
      while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n; done
    done
  done
fi
wait
# Packed now and again at the end: the assembly below reruns cells that did
# not finish (up to a minute per group), and a call cut during it must still
# bring back what landed (2026-11-27: a cut call returned no budgets.tgz).
pack() { tar czf "$OUT/budgets.tgz" --exclude="*.safetensors" --exclude="*.png" -C "$WORK" .; }
pack

# One table per group: the per-method or per-size folders' cells copied into
# one folder, and the bench rerun there with every method and size (cells
# reused; a cell that did not finish is run again, so each rerun is cut short:
# what it prints is what finished, with "-" for the rest).
assemble() {  # NAME SOURCE PARTS..., then -- and lg bench options
  local name=$1 source=$2; shift 2
  local parts=()
  while [ "$1" != "--" ]; do parts+=("$1"); shift; done; shift
  mkdir -p "$WORK/$name"
  for part in "${parts[@]}"; do
    [ -d "$WORK/$part" ] && cp -rn "$WORK/$part"/. "$WORK/$name"/
  done
  timeout 60 python3 -m lgcli bench "$source" -o "$WORK/$name" --markdown "$@" \
    > "$WORK/$name.md" 2> "$WORK/$name.log"
  echo "$name (assembled): exit $?" >> "$WORK/status.txt"
}
part b1500 && assemble b1500-$DEPTH_SIZE "$M" b1500-$DEPTH_SIZE-select b1500-$DEPTH_SIZE-block-ablation b1500-$DEPTH_SIZE-tleg -- \
  "${REAL[@]}" --sizes $DEPTH_SIZE --methods select,block-ablation,tleg --budget "$B1500"
part b1500 && assemble b1500-$WIDTH_SIZE "$M" b1500-$WIDTH_SIZE-select b1500-$WIDTH_SIZE-activation -- \
  "${REAL[@]}" --sizes $WIDTH_SIZE --methods select,activation --budget "$B1500"
part example && assemble ex-b1500 "$EXAMPLE" ex-b1500-3x64 ex-b1500-6x64 ex-b1500-3x128 ex-b1500-8x128 -- \
  "${EXAMPLE_ARGS[@]}" --sizes 3x64,6x64,3x128,8x128 --methods "$EXAMPLE_METHODS" --budget "$B1500"
part example6000 && assemble ex-b6000 "$EXAMPLE" $(cd "$WORK" && ls -d ex-b6000-*x*-* 2>/dev/null | grep -v '\.') -- \
  "${EXAMPLE_ARGS[@]}" --sizes 3x64,6x64,3x128,8x128 --methods "$EXAMPLE_METHODS" --budget "$B6000"

# Learngene files stay behind (tens of MB), and the curves' figures (0.1 MB
# each): the cells, tables and logs come back.
pack
cat "$WORK/status.txt"
for f in "$WORK"/abl-*.md "$WORK"/b1500-$DEPTH_SIZE.md "$WORK"/b1500-$WIDTH_SIZE.md "$WORK"/ex-b1500.md \
    "$WORK"/ex-b6000.md; do
  [ -f "$f" ] || continue
  echo "== $f"; cat "$f"
done
