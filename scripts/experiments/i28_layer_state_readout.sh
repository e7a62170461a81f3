#!/usr/bin/env bash
# Issue 28: the layer through scripts/train_state_tracking.py (default recipe otherwise, one restart) with a readout
# that is an affine map of the heads' states: post-norm block, no D_skip u, C frozen at the identity (d = 2HN = 256),
# so the classifier reads LayerNorm([Re x, Im x]), and with one-hot heads that is affine in x.
# Usage: scripts/experiments/i28_layer_state_readout.sh TASK STEPS "SEEDS" [NAME] [TRANSITION]
set -euo pipefail
task=${1:-a5} steps=${2:-2000} seeds=${3:-"2 3"} name=${4:-state_readout} transition=${5:-dictionary}
scripts/experiments/i28_layer_variant.sh "$name" "$task" "$steps" \
  "{\"pd_ssm_transition\": \"$transition\", \"pd_ssm_output_skip\": false, \"pd_ssm_output_init\": \"identity\", \"pd_ssm_output_trainable\": false}" \
  "$seeds" --block_type post_norm_mixer --hidden_size 256
