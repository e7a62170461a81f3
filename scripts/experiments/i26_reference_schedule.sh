#!/usr/bin/env bash
# The per-head-readout reference (cycle navigation, a choice per head, the recipe of RESULTS.md §2) at the
# adapter's step count and schedule, one difference at a time: 1500 constant (the recorded row), 800 constant,
# 800 with the adapter's warm-up + cosine, and that with its gradient clipping. Records:
# results/adapter/issue26/sentence_reference.jsonl.
#
#   bash scripts/experiments/i26_reference_schedule.sh "SEEDS"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
common=(--task cycle_navigation --standardize --sentence_classes 8 --wp_lr_divisor 5 --readout per_head --per_head
    --json results/adapter/issue26/sentence_reference.jsonl)
for seed in $1; do
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --steps 1500
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --steps 800
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --steps 800 --schedule warmup_cosine
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --steps 800 --schedule warmup_cosine --grad_clip 1
done
