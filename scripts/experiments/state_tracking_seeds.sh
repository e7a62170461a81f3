#!/usr/bin/env bash
# One state-tracking run per seed, each a single seed (--restarts 1; RESTARTS="" keeps the recipe's own restarts),
# every record merged into results/state_tracking/summary.json. The rows of RESULTS.md "State tracking" come from calls of this script.
#
#   bash scripts/experiments/state_tracking_seeds.sh NAME TASK "SEEDS" [extra flags of train_state_tracking.py]
#   bash scripts/experiments/state_tracking_seeds.sh par_default parity "0 1 2 3 4"
#   bash scripts/experiments/state_tracking_seeds.sh cyc_bank cycle_navigation "0 1 2 3 4" --extra_config '{"pd_ssm_transition": "bank"}'
#   bash scripts/experiments/state_tracking_seeds.sh a5_default a5 "0 1 2 3 4" --max_steps 2000
#
# The runs take --recipe residual (the recipe named `default` before issue 28, which every command written before it
# ran) unless the extra flags name another: a later --recipe wins. Every run also scores 256 sequences at lengths 1,000 and 4,000 (FAR_LENGTHS="" skips them). Run folders:
# runs/experiments/NAME/s<seed> (resumable with RESUME=1). One torch thread per run, so that two
# runs can share the 2-core machine; CPU seconds are each run's own process time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 task=$2 seeds=$3
shift 3
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
restarts=${RESTARTS-1}  # RESTARTS="" leaves --restarts to the recipe (i28_default_recipe.sh)
for seed in $seeds; do
    python scripts/train_state_tracking.py --task "$task" --mixer pd_ssm --recipe residual ${restarts:+--restarts "$restarts"} --seed "$seed" \
        --output_dir "runs/experiments/$name/s$seed" --summary results/state_tracking/summary.json \
        --far_lengths "${FAR_LENGTHS-1000,4000}" \
        ${RESUME:+--resume} "$@"
done
