#!/usr/bin/env bash
# Issue 26: SmolLM2-135M cycle navigation with the adapter of filler-proxy round 10 (identity bank entry, logit 3;
# C frozen, no D_skip u, so the classifier reads the automaton states through a fixed map), the run
# runs/experiments/cyc_idbank3 (chance) with those two changes. Usage: i26_smollm2_fixed_readout.sh "SEEDS" [flags]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seeds=${1:-0}
shift || true
bash scripts/experiments/adapter_smollm2.sh cyc_idbank3_fixedC "$seeds" --task cycle_navigation --num_heads 16 \
    --initial_state one_hot --input_map none --transition bank --dictionary_diagonal_init 0 --identity_entry_logit 3 \
    --output_skip false --frozen_mixer_parameters magnitude,phase,out_proj "$@"
