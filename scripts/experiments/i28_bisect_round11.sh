#!/usr/bin/env bash
# Issue 28, bisection round 11: as round 10 (W_P's learning rate 1e-2 / 128, embedding frozen) with the gain of the
# RMSNorm in front of W_P frozen too (does the reference need that trained per-feature gain?).
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round11.jsonl
for seed in 3 2; do
  python scripts/experiments/i28_bisect.py --model reference --table linear --readout norm --hidden 128 \
    --table_lr 7.8125e-5 --freeze_embed --freeze_norm --seed $seed --json $out
done
