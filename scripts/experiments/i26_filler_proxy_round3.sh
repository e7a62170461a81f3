#!/usr/bin/env bash
# Issue 26, filler proxy round 3: towards SmolLM2's features, one difference at a time, with the identity entry
# (logit 3) at the adapter's temperature 0.1, seed 0: width 576 (SmolLM2's), then width 576 with a shared
# component of 10x the token-specific part in every embedding (anisotropic features).
set -euo pipefail
export OMP_NUM_THREADS=1
out=runs/i26/proxy_round3.jsonl
cfg='{"pd_ssm_identity_entry_logit": 3.0, "pd_ssm_temperature": 0.1}'
python scripts/experiments/i26_filler_proxy.py --seed 0 --width 576 --config "$cfg" --json $out
python scripts/experiments/i26_filler_proxy.py --seed 0 --width 576 --common_scale 10 --config "$cfg" --json $out
