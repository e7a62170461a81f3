#!/usr/bin/env bash
# Issue 26, filler proxy round 7 (width 576 learns on 1 of 3 seeds where width 64 learns on 2 of 2): the selection's
# init scale. W_s ~ N(0, 0.02^2) gives token logits of std 0.02 sqrt(d): 0.48 at d = 576 against 0.16 at 64. Width
# 576 with W_s's init scaled by sqrt(64 / 576) = 1/3 (the logit spread of width 64), seeds 1 and 2 (both at chance
# in rounds 5-6), identity entry (logit 3), temperature 0.1.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round7.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}'
for seed in 1 2; do
  python scripts/experiments/i26_filler_proxy.py --seed $seed --width 576 --selection_init_scale 0.3333 --config "$cfg" --json $out
done
