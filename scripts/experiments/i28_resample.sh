#!/usr/bin/env bash
# Issue 28, item 3: dead-head resampling in the reference automaton (scripts/experiments/i28_resample.py) on
# modular arithmetic, 8 heads of N = 64, 3,000 steps; variants: resampling every 250 steps or never, with the
# length curriculum over the first 1,500 steps or lengths 3-40 from the start. Records (one JSON per line, with
# the variant): results/state_tracking/issue28/resample.jsonl.
#   bash scripts/experiments/i28_resample.sh ["VARIANTS"] ["SEEDS"]
#   bash scripts/experiments/i28_resample.sh "resample_curriculum curriculum resample_flat flat" "0"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
variants=${1:-"resample_curriculum curriculum resample_flat flat"}
seeds=${2:-"0 1 2"}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
out=results/state_tracking/issue28/resample.jsonl
for seed in $seeds; do
    for variant in $variants; do
        case $variant in
            resample_curriculum) flags="--resample_every 250 --curriculum 1500" ;;
            curriculum) flags="--resample_every 0 --curriculum 1500" ;;
            resample_flat) flags="--resample_every 250 --curriculum 0" ;;
            flat) flags="--resample_every 0 --curriculum 0" ;;
            *) echo "unknown variant $variant" >&2; exit 2 ;;
        esac
        json=runs/i28/resample/${variant}_s${seed}.json
        # shellcheck disable=SC2086
        python scripts/experiments/i28_resample.py --seed "$seed" --steps 3000 --json "$json" $flags
        python -c "import json, sys; r = json.load(open(sys.argv[1])); r['variant'] = sys.argv[2]; print(json.dumps(r))" "$json" "$variant" >> "$out"
    done
done
