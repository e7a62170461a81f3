#!/usr/bin/env bash
# Issue 28, bisection round 2 (A5 k = 2, seeds 2 and 3, 2,000 steps, 256 test sequences per bucket): which part of
# the layer's readout path stops the reference automaton (round 1: the whole block path does).
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i28/bisect_round2.jsonl
for seed in 2 3; do
  for readout in block_noembed block_nomlp proj_norm; do
    python scripts/experiments/i28_bisect.py --model reference --readout $readout --seed $seed --json $out
  done
done
