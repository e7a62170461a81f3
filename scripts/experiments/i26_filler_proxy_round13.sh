#!/usr/bin/env bash
# Issue 26, filler proxy round 13. Width 64 learns the stand-in on every seed tried, width 576 on 2 of 5 (rounds
# 10-11, fixed readout). The two maps that read 576-dim vectors (the selection W_s and the classifier) move their
# outputs ~width x lr per Adam step; the bank's matrices do not depend on the width. One change against round 10/11:
# W_s and the classifier at lr x 64 / 576, everything else at lr (round 6 divided every rate and round 9 W_s's only).
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round13.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1, "pd_ssm_output_trainable": false, "pd_ssm_output_skip": false}'
for seed in 2 3 4; do
    python scripts/experiments/i26_filler_proxy.py --seed "$seed" --width 576 --selection_lr_scale 0.1111 \
        --classifier_lr_scale 0.1111 --config "$cfg" --json $out
done
