#!/usr/bin/env bash
# Issue 28, item 3: modular arithmetic through the package's layer, the driver's default recipe (`table`) ported to
# the reference automaton that learnt it (scripts/experiments/i28_resample.sh, variant `curriculum`): 8 heads of
# N = 64, 3,000 steps, the length curriculum (the longest training length grows from 5 to 40 over the first 1,500
# steps). `table` itself would read all d = 2 H N = 1,024 features into W_P: Linear(1024, H N^2) = 33.5 M weights,
# ~5 s a step on this CPU. Two ways round it (READOUT):
#   identity  d = 1,024 and C = I (frozen) as in `table`, the one-hot states read through the final RMSNorm, and
#             W_P reading the first 16 features (pd_ssm_transition_input_size; the one-hot tokens, vocabulary 9):
#             the reference's free per-token table and linear readout;
#   WIDTH     d = WIDTH (an integer >= 9): W_P reads all of them, and C (2 H N -> d) is trained from N(0, 0.02^2),
#             so the classifier reads RMSNorm(C x), a learnt projection of the states.
# W_P's entries start N(0, 1) either way (init scale sqrt of the features read). One run per seed (--restarts 1),
# far lengths 1,001 and 4,001 (the task's lengths are odd); records merged into results/state_tracking/summary.json; run folders
# runs/experiments/NAME/s<seed> (RESUME=1 to resume).
#   bash scripts/experiments/i28_layer_modarith.sh NAME READOUT "SEEDS" [extra flags]
#   bash scripts/experiments/i28_layer_modarith.sh i28_modarith_identity identity "0 1 2 3 4"
#   bash scripts/experiments/i28_layer_modarith.sh i28_modarith_d16 16 "0 1 2 3 4"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 readout=$2 seeds=$3
shift 3
if [ "$readout" = identity ]; then
    flags=(--pd_ssm_transition_init_scale 4 --extra_config '{"pd_ssm_transition_input_size": 16}')
else
    scale=$(python -c "import math, sys; print(math.sqrt(int(sys.argv[1])))" "$readout")
    flags=(--hidden_size "$readout" --pd_ssm_transition_init_scale "$scale" --pd_ssm_output_init normal
        --pd_ssm_output_trainable true)
fi
exec bash scripts/experiments/default_recipe_seeds.sh "$name" modular_arithmetic "$seeds" \
    --num_heads 8 --state_size 64 "${flags[@]}" --length_curriculum_steps 1500 --max_steps 3000 \
    --eval_every 250 --save_every 250 --restarts 1 --far_lengths 1001,4001 "$@"
