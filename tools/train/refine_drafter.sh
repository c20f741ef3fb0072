#!/usr/bin/env bash
# Refines a trained drafter against its target in two stages (the first two of the shipped drafter's refinement,
# models/MODEL_CARD.md; its third repeats stage 2 on more windows, train_drafter.py --distill-windows taking several):
#   1. more of grow_pipeline.sh's training on corpus windows (train_drafter.py --init-from), then
#   2. windows of the target's own continuations of corpus prefixes (make_distill_windows.py, through the release
#      build's generate), and training on a mix of those and corpus windows (train_drafter.py --distill-windows).
# Then the export check against the float64 references. Calibrate the result afterwards (tools/eval/evaluate_pair.sh
# or `treespark calibrate`): the calibration file is not carried over.
# Usage: tools/train/refine_drafter.sh [--drafter DIR] [--target DIR] [--out DIR] [--work DIR]
#                                      [--stage1-minutes M] [--stage2-minutes M] [--windows N] [--threads N]
# Needs work/corpus (tools/train/run_pipeline.sh builds it) and a release build (scripts/build.sh release). An existing
# work/distill.npy is reused (delete it after changing the target); stage checkpoints resume as grow_pipeline.sh's do.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=models/treespark-drafter T=models/treespark-target OUT=models/treespark-drafter W=work-data
M1=16 M2=40 N=1000 THREADS=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --drafter) D=$2; shift 2 ;;
    --target) T=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --work) W=$2; shift 2 ;;
    --stage1-minutes) M1=$2; shift 2 ;;
    --stage2-minutes) M2=$2; shift 2 ;;
    --windows) N=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184
TT=tools/train
[ -f "$W/corpus/train.npy" ] || { echo "needs $W/corpus (tools/train/run_pipeline.sh builds it)" >&2; exit 1; }
[ -x build/release/treespark ] || { echo "needs the release build (scripts/build.sh release)" >&2; exit 1; }
"$PY" $TT/train_drafter.py --data "$W/corpus" --target "$T" --init-from "$D" --out "$W/refine-stage1" \
  --ckpt "$W/refine-stage1.pt" --resume --minutes "$M1" --lr 3e-4 --warmup 10 --seed 4321 --threads "$THREADS"
[ -f "$W/distill.npy" ] || "$PY" $TT/make_distill_windows.py --data "$W/corpus/train.npy" --target "$T" \
  --drafter "$D" --n "$N" --seed 4321 --out "$W/distill.npy"
"$PY" $TT/train_drafter.py --data "$W/corpus" --target "$T" --init-from "$W/refine-stage1" --out "$OUT" \
  --ckpt "$W/refine-stage2.pt" --resume --minutes "$M2" --lr 3e-4 --warmup 10 --seed 5432 --threads "$THREADS" \
  --distill-windows "$W/distill.npy" --distill-fraction 0.5
"$PY" $TT/check_export.py --target "$T" --drafter "$OUT"
