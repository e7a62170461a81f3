#!/usr/bin/env bash
# The driver's default as a user runs it: no --recipe (PD-SSM takes `table`), the recipe's own restarts (up to 3:
# seeds s, s + 1000, s + 2000, the next only when a run ends below 100 % validation), one call per seed. Every
# restart's record is merged into results/state_tracking/summary.json; every kept model is also scored on 256
# sequences at lengths 1,000 and 4,000. One torch thread per call (two calls share the 2-core machine); run
# folders runs/experiments/NAME/s<seed> (resumable with RESUME=1). Extra flags go to train_state_tracking.py.
#
#   bash scripts/experiments/default_recipe_seeds.sh NAME TASK "SEEDS" [extra flags]
#   bash scripts/experiments/default_recipe_seeds.sh default_a5 a5 "0 1 2 3 4"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 task=$2 seeds=$3
shift 3
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
for seed in $seeds; do
    python scripts/train_state_tracking.py --task "$task" --mixer pd_ssm --seed "$seed" --far_lengths 1000,4000 \
        --output_dir "runs/experiments/$name/s$seed" --summary results/state_tracking/summary.json \
        ${RESUME:+--resume} "$@"
done
