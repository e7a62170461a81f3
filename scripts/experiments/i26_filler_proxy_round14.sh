#!/usr/bin/env bash
# Issue 26, filler proxy round 14. Round 12: a common feature direction (--common_scale 1.1, about SmolLM2's layer-3
# ratio) sends round 10's adapter back to chance on seed 0, which learns without it. One change against round 12:
# the features centred per dimension over the vocabulary (--center), which removes that direction.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round14.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1, "pd_ssm_output_trainable": false, "pd_ssm_output_skip": false}'
for seed in 0 1; do
    python scripts/experiments/i26_filler_proxy.py --seed "$seed" --width 576 --common_scale 1.1 --center \
        --config "$cfg" --json $out
done
