#!/usr/bin/env bash
# Issue 26, filler proxy round 8. Rounds 3-7 ran width 576 at temperature 0.1 only (round 2 had shown that 0.1 also
# learns at width 64, on seed 0), while at width 64 the identity entry learned with the default temperature 1.0 on
# seeds 0 and 1. One change against round 5/6: width 576, identity entry (logit 3), temperature 1.0, seeds 0, 1, 2.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round8.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0}'
for seed in 0 1 2; do
    python scripts/experiments/i26_filler_proxy.py --seed "$seed" --width 576 --config "$cfg" --json $out
done
