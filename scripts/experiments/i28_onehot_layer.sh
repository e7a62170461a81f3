#!/usr/bin/env bash
# Issue 28: the package's layer as the reference automaton. `--recipe direct` with the token embedding frozen at
# one-hot codes (`--embedding_init one_hot`: token v is e_v) and no norm in front of W_P, so that P_t's logits W_P e_v
# are column v of W_P, a free N x N table per head and token; W_P's entries N(0, 1) (init scale sqrt(d) = 16) at the
# full lr 1e-2 (the reference's table: N(0, 1) logits, Adam at 1e-2); C the identity (frozen) and the block
# `mixer_only`, so that the model's final RMSNorm and the classifier read the one-hot states themselves (no
# LayerNorm: bisect rounds 12-15).
#
#   bash scripts/experiments/i28_onehot_layer.sh NAME TASK "SEEDS" [more flags]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 task=$2 seeds=$3
shift 3
bash scripts/experiments/state_tracking_seeds.sh "$name" "$task" "$seeds" --recipe direct --embedding_init one_hot \
    --pd_ssm_transition_norm false --pd_ssm_transition_init_scale 16 --transition_lr_scale 1 \
    --pd_ssm_output_init identity --block_type mixer_only "$@"
