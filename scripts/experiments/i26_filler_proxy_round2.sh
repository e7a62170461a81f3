#!/usr/bin/env bash
# Issue 26, filler proxy round 2: the identity entry (logit 3) at the adapter's temperature 0.1 (its SmolLM2 runs)
# instead of 1.0 (round 1), seed 0: does a saturated straight-through softmax stop the bank choice from learning?
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round2.jsonl
python scripts/experiments/i26_filler_proxy.py --seed 0 --config '{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}' --json $out
