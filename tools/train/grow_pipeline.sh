#!/usr/bin/env bash
# Re-runs how the shipped pair was made from the small pair that run_pipeline.sh trains:
#   small target + drafter -> grow_target.py (2x wider, 5x deeper, same function) -> train the grown target
#   (train_target.py --init-from) -> train the carried-along drafter against it (train_drafter.py --init-from)
#   -> export check against the float64 references.
# Usage: tools/train/grow_pipeline.sh [--small-target DIR] [--small-drafter DIR] [--target-minutes M]
#                                     [--drafter-minutes M] [--work DIR] [--models DIR] [--seed N]
# Both trainers write resumable checkpoints (work/grown-*.pt every 5 minutes): run the same command again after
# a stop and it goes on where it was, with the same wall-clock schedule. CPU, one thread each (Debian's
# python3-torch), is the documented path; the shipped weights were made this way (models/MODEL_CARD.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
SMALL_T=work-data/small-target SMALL_D=work-data/small-drafter TMIN=72 DMIN=35 W=work-data M=models SEED=1234
while [[ $# -gt 0 ]]; do
  case "$1" in
    --small-target) SMALL_T=$2; shift 2 ;;
    --small-drafter) SMALL_D=$2; shift 2 ;;
    --target-minutes) TMIN=$2; shift 2 ;;
    --drafter-minutes) DMIN=$2; shift 2 ;;
    --work) W=$2; shift 2 ;;
    --models) M=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184
T=tools/train
[ -f "$W/corpus/train.npy" ] || { echo "needs $W/corpus (tools/train/run_pipeline.sh builds it)" >&2; exit 1; }
if [ ! -d "$W/grown-target" ]; then
  "$PY" $T/grow_target.py --target "$SMALL_T" --drafter "$SMALL_D" --width 2 --depth 5 --noise 1e-3 --seed "$SEED" \
    --out-target "$W/grown-target" --out-drafter "$W/grown-drafter"
fi
"$PY" $T/train_target.py --data "$W/corpus" --tokenizer "$SMALL_T" --init-from "$W/grown-target" \
  --out "$M/treespark-target" --ckpt "$W/grown-target.pt" --resume --minutes "$TMIN" --batch 8 --lr 2e-4 \
  --warmup 10 --eval-every 50 --seed "$SEED"
"$PY" $T/train_drafter.py --data "$W/corpus" --target "$M/treespark-target" --init-from "$W/grown-drafter" \
  --out "$M/treespark-drafter" --ckpt "$W/grown-drafter.pt" --resume --minutes "$DMIN" --lr 5e-4 --warmup 10 \
  --eval-every 50 --seed "$SEED"
"$PY" $T/check_export.py --target "$M/treespark-target" --drafter "$M/treespark-drafter"
