#!/usr/bin/env bash
# Issue 26, filler proxy round 6 (round 5: at width 576 seed 1 stays at chance where seed 0 learns, while at width 64
# seeds 0 and 1 learn): is it the learning rate per width? Adam moves every weight of W_s by ~lr a step, so a token's
# selection logits move ~lr * d * E|u|: 9x faster at d = 576 than at 64. Width 576, identity entry (logit 3),
# temperature 0.1: lr 3e-3 * 64 / 576 = 3.3e-4 on seeds 1 and 2, and lr 3e-3 on seed 2 beside it.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round6.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}'
python scripts/experiments/i26_filler_proxy.py --seed 1 --width 576 --lr 3.3e-4 --config "$cfg" --json $out
python scripts/experiments/i26_filler_proxy.py --seed 2 --width 576 --lr 3.3e-4 --config "$cfg" --json $out
python scripts/experiments/i26_filler_proxy.py --seed 2 --width 576 --config "$cfg" --json $out
