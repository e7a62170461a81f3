#!/usr/bin/env bash
# Redraws results/adapter/accuracy_by_transitions.png (RESULTS.md §2) from the records in results/adapter/summary.json:
# one series per run-folder substring, mean over the seeds found, every seed as a dot.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
python scripts/plot_adapter.py --base smollm2-135m --tasks parity,cycle_navigation,a5 \
  --series "PD-SSM 16 automaton heads @L3, classifier=runs/i15/h16none_s" \
  --series "PD-SSM 16 automaton heads @L3, classifier=runs/i15/cyc_h16none_s0" \
  --series "PD-SSM sentence ends, bank @L3, classifier=runs/experiments/i26_sent_bank_" \
  --series "PD-SSM sentence ends, shared choice @L3, classifier=runs/experiments/i26_sent_shared_" \
  --series "PD-SSM sentence ends, bank @L3, a readout per head=runs/experiments/i26_sent_cyc_ph" \
  --series "PD-SSM sentence ends, bank @L3, a readout per head=runs/experiments/i26_sent_par_ph" \
  --series "PD-SSM sentence ends, a readout per head, trained after a preamble=runs/experiments/i26_sent_cyc_pre30" \
  --series "PD-SSM 2 heads with B @L3, classifier (earlier)=runs/exp/long_parity_pd_L3_s" \
  --series "PD-SSM sentence ends, reads L3, writes after the last, LM head=runs/experiments/i26_sent_lm_par" \
  --series "PD-SSM sentence ends, reads L3, writes after the last, LM head=runs/experiments/i26_sent_lm_cyc" \
  --series "PD-SSM sentence ends, the heads' vote written after the last layer, LM head=runs/experiments/i26_sent_lm_vote_" \
  --series "PD-SSM @ last layer, LM head=runs/i15/lm_dict_s0" \
  --series "LoRA attn L0-3 + classifier (~adapter size)=runs/i15/lora21_" \
  --series "LoRA attn L0-3 + classifier, 200 steps, sentence data=i26_sent_base_par/s0:lora_classifier" \
  --series "LoRA attn L0-3 + classifier, 200 steps, sentence data=i26_sent_lora_classifier_" \
  --series "diag_lru adapter sentence ends @L3, classifier=runs/experiments/i26_sent_diag_" \
  --series "diag_lru adapter @L3, classifier=runs/exp/cmp_parity_diaglru_L3" \
  --series "diag_lru adapter @L3, classifier=runs/i15/diag_cyc_s0" \
  --series "linear probe (last hidden state)=:probe" --series "untrained base, 4-shot=:fewshot" \
  --out results/adapter/accuracy_by_transitions.png
