#!/usr/bin/env bash
# Issue 28, item 3: modular arithmetic through the package's layer, the driver's default recipe (`table`) ported to
# the reference automaton that learnt it (scripts/experiments/i28_resample.sh, variant `curriculum`): 8 heads of
# N = 64, 3,000 steps, the length curriculum (the longest training length grows from 5 to 40 over the first 1,500
# steps). Why not `table`'s d = 2 H N = 1,024 with C the identity: W_P would be Linear(1024, H N^2) = 33.5 M
# weights, ~5 s a step on this CPU. With d = WIDTH (>= the vocabulary of 9, one-hot tokens) W_P is the free
# per-token table itself, W_P's entries N(0, 1) (init scale sqrt(d)), and C (2 H N -> d) is trained from
# N(0, 0.02^2): the classifier reads RMSNorm(C x), a learnt linear map of the states as the reference's readout.
# One run per seed (--restarts 1), far lengths 1,000 and 4,000; records merged into
# results/state_tracking/summary.json; run folders runs/experiments/NAME/s<seed> (RESUME=1 to resume).
#   bash scripts/experiments/i28_layer_modarith.sh NAME WIDTH "SEEDS" [extra flags]
#   bash scripts/experiments/i28_layer_modarith.sh i28_modarith_d16 16 "0 1 2 3 4"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 width=$2 seeds=$3
shift 3
scale=$(python -c "import math, sys; print(math.sqrt(int(sys.argv[1])))" "$width")
exec bash scripts/experiments/default_recipe_seeds.sh "$name" modular_arithmetic "$seeds" \
    --num_heads 8 --state_size 64 --hidden_size "$width" --pd_ssm_transition_init_scale "$scale" \
    --pd_ssm_output_init normal --pd_ssm_output_trainable true --length_curriculum_steps 1500 --max_steps 3000 \
    --eval_every 250 --save_every 250 --restarts 1 "$@"
