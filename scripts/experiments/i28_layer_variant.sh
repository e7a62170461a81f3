#!/usr/bin/env bash
# Issue 28: the package's PD-SSM layer through scripts/train_state_tracking.py (the residual recipe, called default then; one restart), one
# variant on one task over some seeds, one CPU thread; each run in runs/i28/<name>/<task>_seed<s>/ and merged into
# runs/i28/summary.json.
# Usage: scripts/experiments/i28_layer_variant.sh NAME TASK STEPS 'CONFIG_JSON' "SEEDS" [extra train flags...]
#   e.g. scripts/experiments/i28_layer_variant.sh direct a5 2000 '{"pd_ssm_transition": "direct"}' "2 3"
set -euo pipefail
name=$1 task=$2 steps=$3 config=$4 seeds=$5
shift 5
export OMP_NUM_THREADS=1
for seed in $seeds; do
  python scripts/train_state_tracking.py --task "$task" --mixer pd_ssm --recipe residual --max_steps "$steps" --restarts 1 \
    --seed "$seed" --config "$config" --output_dir "runs/i28/$name/${task}_seed$seed" \
    --summary runs/i28/summary.json "$@"
done
