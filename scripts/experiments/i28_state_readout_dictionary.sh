#!/usr/bin/env bash
# Issue 28: the default recipe's layer (dictionary transitions) with the readout that the bisection and the adapter's
# filler proxy both point to: a post-norm mixer-only block, d = 2HN = 256, no D_skip u, C frozen at the identity, so
# the classifier reads a norm of the automaton states through no trained map. One restart per seed, far lengths.
# Usage: scripts/experiments/i28_state_readout_dictionary.sh TASK "SEEDS" [extra flags of train_state_tracking.py]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
task=$1 seeds=$2
shift 2
bash scripts/experiments/state_tracking_seeds.sh "i28_state_readout_dict_${task}" "$task" "$seeds" \
    --block_type post_norm_mixer --hidden_size 256 \
    --extra_config '{"pd_ssm_output_skip": false, "pd_ssm_output_init": "identity", "pd_ssm_output_trainable": false}' "$@"
