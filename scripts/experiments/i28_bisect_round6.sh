#!/usr/bin/env bash
# Issue 28, bisection round 6 (A5 k = 2, seed 2 (then 3), 2,000 steps, 256 test sequences per bucket): the identity C
# without the norm ("eye"), and the norm without C ("norm"), d = H N = 128.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round6.jsonl
for seed in ${SEEDS:-2}; do
  for readout in eye norm; do
    python scripts/experiments/i28_bisect.py --model reference --readout $readout --hidden 128 --seed $seed --json $out
  done
done
