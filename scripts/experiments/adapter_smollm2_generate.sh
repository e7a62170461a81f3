#!/usr/bin/env bash
# The LLM's own greedy answer at 40 transitions (4x) with the LM-head adapters that adapter_smollm2_sentences.sh
# saved under runs/experiments/NAME/s<seed>/ssm/adapter: 256 stories, no few-shot prefix, one JSON per seed,
# results/adapter/issue26/<OUT>_s<seed>.json (RESULTS.md §2).
#
#   bash scripts/experiments/adapter_smollm2_generate.sh NAME TASK "SEEDS" OUT
#   bash scripts/experiments/adapter_smollm2_generate.sh i26_sent_lm_vote_cyc cycle_navigation "0 1 2" generate_cyc_lm_vote
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 task=$2 seeds=$3 out=$4
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
for seed in $seeds; do
    python scripts/eval_nl_state_tracking.py --model smollm2-135m --adapter "runs/experiments/$name/s$seed/ssm/adapter" \
        --task "$task" --transitions 40 --num_stories 256 --fewshot 0 --batch_size 16 \
        --out "results/adapter/issue26/${out}_s$seed.json"
done
