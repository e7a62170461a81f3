#!/usr/bin/env bash
# Issue 28, bisection round 5 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): C initialised to
# the identity (d = H N), then the final norm and the classifier (readout eye_norm).
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round5.jsonl
for seed in 2 3; do
  python scripts/experiments/i28_bisect.py --model reference --readout eye_norm --hidden 128 --seed $seed --json $out
done
