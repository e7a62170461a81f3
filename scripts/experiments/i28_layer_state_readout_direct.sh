#!/usr/bin/env bash
# Issue 28: as i28_layer_state_readout.sh (post-norm block, no D_skip u, C frozen at the identity, d = 256) with the
# direct transition; the post-norm block feeds the mixer the raw embedding (N(0, 0.02^2)), so W_P starts at
# N(0, 50^2 / d) for N(0, 1) logits. Usage: scripts/experiments/i28_layer_state_readout_direct.sh TASK STEPS "SEEDS"
set -euo pipefail
task=${1:-a5} steps=${2:-2000} seeds=${3:-"2 3"}
scripts/experiments/i28_layer_variant.sh state_readout_direct "$task" "$steps" \
  '{"pd_ssm_transition": "direct", "pd_ssm_transition_init_scale": 50.0, "pd_ssm_output_skip": false, "pd_ssm_output_init": "identity", "pd_ssm_output_trainable": false}' \
  "$seeds" --block_type post_norm_mixer --hidden_size 256
