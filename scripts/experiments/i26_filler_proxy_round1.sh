#!/usr/bin/env bash
# Issue 26, filler proxy round 1: cycle navigation with 0-10 fillers after each move; bank transitions from a random
# start, without and with the identity entry (logit 3), seeds 0 and 1.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round1.jsonl
for seed in 0 1; do
  python scripts/experiments/i26_filler_proxy.py --seed $seed --json $out
  python scripts/experiments/i26_filler_proxy.py --seed $seed --config '{"pd_ssm_identity_entry_logit": 3.0}' --json $out
done
