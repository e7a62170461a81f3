#!/usr/bin/env bash
# Issue 28, bisection round 10: as round 9 (W_P's learning rate 1e-2 / 128) with the embedding frozen as well.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round10.jsonl
for seed in 2 3; do
  python scripts/experiments/i28_bisect.py --model reference --table linear --readout norm --hidden 128 \
    --table_lr 7.8125e-5 --freeze_embed --seed $seed --json $out
done
