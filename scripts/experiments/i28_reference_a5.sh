#!/usr/bin/env bash
# Issue 28: the minimal reference automaton (scripts/reference_automaton.py) on A5 (k = 2), 2,000 steps, 1,024 test
# sequences per length bucket, one CPU thread. Usage: scripts/experiments/i28_reference_a5.sh [seeds...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=1
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(0 1 2 3 4)
for seed in "${seeds[@]}"; do
  python scripts/reference_automaton.py --task a5 --seed "$seed" --steps 2000 --eval_samples 1024 \
    --json "results/state_tracking/issue28/reference_automaton_a5_seed${seed}.json"
done
