#!/usr/bin/env bash
# Issue 28: the default recipe as a user runs it, WITH its own restarts (3 by default: seeds s, s + 1000, s + 2000,
# kept by validation; unlike state_tracking_seeds.sh's default, which trains one seed per run), one run per recipe
# seed: state_tracking_seeds.sh with RESTARTS="". Every restart's record is merged into
# results/state_tracking/summary.json; each run also scores 256 sequences at lengths 1,000 and 4,000
# (FAR_LENGTHS="" skips them). Extra flags go to train_state_tracking.py.
#
#   bash scripts/experiments/i28_default_recipe.sh NAME TASK "SEEDS" [extra flags of train_state_tracking.py]
#   bash scripts/experiments/i28_default_recipe.sh i28_exact_a5 a5 "0 1 2 3 4" --target_accuracy 1.0 --max_steps 2000
#
# Run folders: runs/experiments/NAME/s<seed>/seed_<restart seed>/ (resumable with RESUME=1). One torch thread.
set -euo pipefail
RESTARTS="" exec bash "$(dirname "${BASH_SOURCE[0]}")/state_tracking_seeds.sh" "$@"
