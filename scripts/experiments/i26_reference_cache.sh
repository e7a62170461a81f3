#!/usr/bin/env bash
# The per-head-readout reference with every adapter difference closed so far (cycle navigation, a choice per head,
# 800 steps of warm-up + cosine, gradient clipping, the adapter's inits) plus one more at a time: the training
# features rounded to bfloat16 as the adapter's frozen-prefix cache stores them (test features stay float32), and
# the z-score statistics of the first 64 training stories only. Records:
# results/adapter/issue26/sentence_reference.jsonl.
#
#   bash scripts/experiments/i26_reference_cache.sh "SEEDS"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
common=(--task cycle_navigation --standardize --sentence_classes 8 --wp_lr_divisor 5 --readout per_head --per_head
    --steps 800 --schedule warmup_cosine --grad_clip 1 --table_std 0.3536 --scale 0.5774
    --json results/adapter/issue26/sentence_reference.jsonl)
for seed in $1; do
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --train_features_bf16
    python scripts/experiments/i26_sentence_reference.py "${common[@]}" --seed "$seed" --stats_stories 64
done
