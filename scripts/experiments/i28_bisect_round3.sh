#!/usr/bin/env bash
# Issue 28, bisection round 3 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): the final norm
# (C then the classifier without it) and the readout's init scale (the linear readout at N(0, 0.02^2)).
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round3.jsonl
for seed in 2 3; do
  for readout in proj linear_small; do
    python scripts/experiments/i28_bisect.py --model reference --readout $readout --seed $seed --json $out
  done
done
