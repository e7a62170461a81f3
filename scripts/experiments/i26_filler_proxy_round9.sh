#!/usr/bin/env bash
# Issue 26, filler proxy round 9. Round 6 divided the whole learning rate by 9 at width 576 (chance on seeds 1, 2);
# issue 28 found that only the transition generator's rate needs dividing by the width (a linear map of d inputs
# moves a token's logits ~d times as far per Adam step as a free per-token table). One change against round 5/6:
# width 576, identity entry (logit 3), temperature 0.1, lr 3e-3 for everything but W_s, W_s at 3e-3 x 64 / 576.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round9.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}'
for seed in 0 1 2; do
    python scripts/experiments/i26_filler_proxy.py --seed "$seed" --width 576 --selection_lr_scale 0.1111 \
        --config "$cfg" --json $out
done
