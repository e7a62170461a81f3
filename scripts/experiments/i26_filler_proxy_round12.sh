#!/usr/bin/env bash
# Issue 26, filler proxy round 12. Round 10's fixed readout (C frozen, no D_skip u) learned the proxy on 2 of 3 seeds
# at width 576 but stayed at chance on SmolLM2's cycle-navigation stories (runs/experiments/cyc_idbank3_fixedC).
# SmolLM2's layer-3 features share a large common direction (|mean| / |deviation| ~ 1.1 after RMSNorm); rounds 3-4
# showed that a common component breaks the proxy with a trained C. One change against round 10: --common_scale 1.1.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round12.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1, "pd_ssm_output_trainable": false, "pd_ssm_output_skip": false}'
for seed in 0 1; do
    python scripts/experiments/i26_filler_proxy.py --seed "$seed" --width 576 --common_scale 1.1 --config "$cfg" --json $out
done
