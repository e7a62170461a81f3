#!/usr/bin/env bash
# The per-head-readout reference (cycle navigation, a choice per head, 800 steps with the adapter's warm-up +
# cosine) with the adapter's inits, one at a time: the bank's score matrices N(0, 1/N) (--table_std 0.3536), the
# selection W_P at nn.Linear's default scale 1/sqrt(3d) (--scale 0.5774), then both. Records:
# results/adapter/issue26/sentence_reference.jsonl.
#
#   bash scripts/experiments/i26_reference_init.sh "SEEDS"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
common=(--task cycle_navigation --standardize --sentence_classes 8 --wp_lr_divisor 5 --readout per_head --per_head
    --steps 800 --schedule warmup_cosine --grad_clip 1 --json results/adapter/issue26/sentence_reference.jsonl)
for seed in $1; do
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --table_std 0.3536
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --scale 0.5774
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --table_std 0.3536 --scale 0.5774
done
