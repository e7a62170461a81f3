#!/usr/bin/env bash
# Issue 28, bisection round 9 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): the layer's
# factored table W_P RMSNorm(E[v]) (d = 128) with W_P's Adam learning rate divided by d (1e-2 / 128), so that one
# step moves each logit by about as much as in the free table; norm readout.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round9.jsonl
for seed in 2 3; do
  python scripts/experiments/i28_bisect.py --model reference --table linear --readout norm --hidden 128 \
    --table_lr 7.8125e-5 --seed $seed --json $out
done
