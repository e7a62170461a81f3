#!/usr/bin/env bash
# The SmolLM2-135M adapter with one transition per sentence (docs/adapter.md, "One transition per sentence"):
# adapter_smollm2.sh's recipe (after layer 3, classifier readout, 800 steps of 32 stories from a pool of 512) with
# 16 pure-automaton heads of N = 8 whose state moves only at tokens ending a sentence, a bank of 8 transitions per
# head chosen from the z-scored layer-3 features (the choice at lr 2e-3, the rest at 1e-2), temperature 1, and the
# classifier reading the one-hot states through a fixed C. Test: SAMPLES (default 256) stories per bucket.
#
#   bash scripts/experiments/adapter_smollm2_sentences.sh NAME TASK "SEEDS" [more train_adapter.py flags]
#   bash scripts/experiments/adapter_smollm2_sentences.sh sent_cyc cycle_navigation "0 1 2 3 4"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 task=$2 seeds=$3
shift 3
SAMPLES=${SAMPLES:-256} exec bash scripts/experiments/adapter_smollm2.sh "$name" "$seeds" --task "$task" \
    --num_heads 16 --initial_state one_hot --input_map none --transitions_at sentence_ends --transition bank \
    --dict_size 8 --dictionary_diagonal_init 0 --temperature 1.0 --output_skip false \
    --frozen_mixer_parameters magnitude,phase,out_proj --standardize_input true --learning_rate 1e-2 \
    --selection_learning_rate 2e-3 "$@"
