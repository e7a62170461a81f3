#!/usr/bin/env bash
# Issue 26, filler proxy round 10. Rounds 8-9: at width 576 neither temperature 1.0 nor W_s's learning rate / 9
# helps (0 of 2-3 seeds). Issue 28's bisection found that a TRAINED map between the automaton states and the
# classifier breaks the straight-through search (results/state_tracking/issue28/bisect.jsonl, readout "proj"), and the
# adapter's classifier reads C x + D_skip u, with C (d x 2HN) trained: 9x more weights at width 576 than at 64.
# One change against round 5: C frozen at its init and no D_skip u (pd_ssm_output_trainable false,
# pd_ssm_output_skip false); width 576, identity entry (logit 3), temperature 0.1, seeds 0, 1, 2.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round10.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1, "pd_ssm_output_trainable": false, "pd_ssm_output_skip": false}'
for seed in 0 1 2; do
    python scripts/experiments/i26_filler_proxy.py --seed "$seed" --width 576 --config "$cfg" --json $out
done
