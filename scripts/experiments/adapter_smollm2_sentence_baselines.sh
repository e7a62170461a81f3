#!/usr/bin/env bash
# The baselines beside the sentence recipe's PD-SSM rows (RESULTS.md §2), seed 0, on the same 256 test stories per
# bucket: the untrained base 4-shot, a linear probe on the last hidden state and LoRA at the adapter's trainable-
# parameter count (200 steps each, adapter_smollm2_sentences.sh's data), and a diag_lru adapter that also moves only at
# sentence ends on z-scored features. One run folder per method: runs/experiments/i26_sent_<method>_<task>/s0.
#
#   bash scripts/experiments/adapter_smollm2_sentence_baselines.sh TASK ["fewshot probe lora_classifier diag_lru"]
#   bash scripts/experiments/adapter_smollm2_sentence_baselines.sh a5 "probe lora_classifier"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
task=$1 methods=${2:-fewshot probe lora_classifier diag_lru}
for method in $methods; do
    name="i26_sent_${method}_${task}"
    case $method in
        fewshot | probe | lora_classifier)
            SAMPLES=256 bash scripts/experiments/adapter_smollm2_sentences.sh "$name" "$task" "0" --methods "$method" \
                --max_steps 200 --min_steps 200 ;;
        diag_lru)
            SAMPLES=256 bash scripts/experiments/adapter_smollm2.sh "$name" "0" --task "$task" --mixer diag_lru \
                --transitions_at sentence_ends --standardize_input true --learning_rate 1e-2 \
                --frozen_mixer_parameters '' ;;
        *)
            echo "unknown method '$method': expected fewshot, probe, lora_classifier or diag_lru" >&2
            exit 2 ;;
    esac
done
