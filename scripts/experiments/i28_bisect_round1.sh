#!/usr/bin/env bash
# Issue 28, bisection round 1 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): the reference
# with one of the layer's pieces swapped in, and the layer (direct transition) with the reference's optimizer.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round1.jsonl
for seed in 2 3; do
  python scripts/experiments/i28_bisect.py --model reference --seed $seed --json $out
  python scripts/experiments/i28_bisect.py --model reference --table linear --seed $seed --json $out
  python scripts/experiments/i28_bisect.py --model reference --readout block --seed $seed --json $out
  python scripts/experiments/i28_bisect.py --model reference --opt recipe --seed $seed --json $out
  python scripts/experiments/i28_bisect.py --model layer --config '{"pd_ssm_transition": "direct"}' --seed $seed --json $out
done
