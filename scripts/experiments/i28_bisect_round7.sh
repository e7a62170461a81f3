#!/usr/bin/env bash
# Issue 28, bisection round 7 (A5 k = 2, 2,000 steps, 256 test sequences per bucket): the norm readout (RMSNorm and
# the classifier on the states, no C) on seed 3, and with the layer's factored table (W_P RMSNorm(E[v])) on seeds 2, 3.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round7.jsonl
python scripts/experiments/i28_bisect.py --model reference --readout norm --hidden 128 --seed 3 --json $out
for seed in 2 3; do
  python scripts/experiments/i28_bisect.py --model reference --table linear --readout norm --hidden 128 --seed $seed --json $out
done
