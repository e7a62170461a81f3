#!/usr/bin/env bash
# Issue 28, bisection round 8 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): the layer's
# factored table W_P RMSNorm(E[v]) with the embedding E frozen (only W_P trained), norm readout.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round8.jsonl
for seed in 2 3; do
  python scripts/experiments/i28_bisect.py --model reference --table linear --readout norm --hidden 128 --freeze_embed \
    --seed $seed --json $out
done
