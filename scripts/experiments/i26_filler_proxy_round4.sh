#!/usr/bin/env bash
# Issue 26, filler proxy round 4 (after round 3: a shared component 10x the token part stops the identity-entry
# layer at chance): SmolLM2's layer-3 features measure |mean| / |token part| = 1.1 after RMSNorm, so the shared
# component at 1.1; and the 10x one with the embeddings centred (their mean subtracted) before the adapter.
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round4.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}'
python scripts/experiments/i26_filler_proxy.py --seed 0 --width 576 --common_scale 1.1 --config "$cfg" --json $out
python scripts/experiments/i26_filler_proxy.py --seed 0 --width 576 --common_scale 10 --center --config "$cfg" --json $out
