#!/usr/bin/env bash
# Issue 28: the layer through scripts/train_state_tracking.py (default recipe, 2,000 steps, one restart) with the
# readout that sees the automaton state only (block_type mixer_mlp, pd_ssm_output_skip false), dictionary and direct
# transitions, A5 (k = 2). Usage: scripts/experiments/i28_layer_readout.sh "SEEDS" [dictionary|direct ...]
set -euo pipefail
seeds=${1:-"2 3"}
shift || true
for transition in "${@:-dictionary}"; do
  scripts/experiments/i28_layer_variant.sh "readout_${transition}" a5 2000 \
    "{\"pd_ssm_transition\": \"$transition\", \"pd_ssm_output_skip\": false}" "$seeds" --block_type mixer_mlp
done
