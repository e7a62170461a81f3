#!/usr/bin/env bash
# Issue 28, bisect round 12: the layer-like reference that learned A5 on seeds 2 and 3 (round 10: the layer's table
# W_P RMSNorm(embedding) with the embedding frozen and W_P at lr / d, the states read by a norm and the classifier)
# on the other seeds 0, 1 and 4, so that its reliability is known before the package's layer is compared with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=1
for seed in 0 1 4; do
    python scripts/experiments/i28_bisect.py --model reference --table linear --readout norm --hidden 128 \
        --freeze_embed --table_lr 7.8125e-5 --seed "$seed" --json results/state_tracking/issue28/bisect.jsonl
done
