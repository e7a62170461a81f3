#!/usr/bin/env bash
# Issue 26, filler proxy round 5: rounds 3-4 changed the adapter's init along with the shared component (one RNG);
# now the shared vector has its own generator. Width 576, identity entry (logit 3), temperature 0.1: shared
# component 0 vs 1.1 (SmolLM2's measured ratio) on seeds 1 and 2.
# (Stopped after its first run, seed 1 at component 0, which stayed at chance: round 6 follows that up.)
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round5.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}'
for seed in 1 2; do
  for scale in 0 1.1; do
    python scripts/experiments/i26_filler_proxy.py --seed $seed --width 576 --common_scale $scale --config "$cfg" --json $out
  done
done
