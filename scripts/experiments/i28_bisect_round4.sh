#!/usr/bin/env bash
# Issue 28, bisection round 4 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): the readout path
# through C, the norm (and the MLP) with d = 256 = 2 H N, so that C is not a 128 -> 64 bottleneck.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round4.jsonl
for seed in 2 3; do
  for readout in proj_norm block_noembed; do
    python scripts/experiments/i28_bisect.py --model reference --readout $readout --hidden 256 --seed $seed --json $out
  done
done
