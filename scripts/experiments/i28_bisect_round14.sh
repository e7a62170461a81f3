#!/usr/bin/env bash
# Issue 28, bisect round 14: round 12's layer-like reference (5/5 on A5) with one of round 13's two changes (round 13,
# both changes, failed seed 0): the table at the layer's d = 256 (W_P's lr 1e-2 / 256), the states read as round 12
# reads them (an RMSNorm over the H N = 128 states, then the classifier).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=1
for seed in ${SEEDS:-0 1 2 3 4}; do
    python scripts/experiments/i28_bisect.py --model reference --table linear --readout statenorm --hidden 256 \
        --freeze_embed --table_lr 3.90625e-5 --seed "$seed" --json results/state_tracking/issue28/bisect.jsonl
done
