#!/usr/bin/env bash
# Issue 28, bisect round 15: round 12's layer-like reference (5/5 on A5) with one of round 13's two changes (round 13,
# both changes, failed seed 0): the table at round 12's d = 128 (W_P's lr 1e-2 / 128), the states read as the layer's
# post-norm block reads them (LayerNorm over [x, Im x = 0], 2 H N = 256 features).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=1
for seed in ${SEEDS:-0 1 2 3 4}; do
    python scripts/experiments/i28_bisect.py --model reference --table linear --readout layernorm --hidden 128 \
        --freeze_embed --table_lr 7.8125e-5 --seed "$seed" --json results/state_tracking/issue28/bisect.jsonl
done
