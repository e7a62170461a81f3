#!/usr/bin/env bash
# Issue 28, item 3: the two-layer cascade automaton (scripts/experiments/i28_cascade.py) on modular arithmetic,
# 3,000 steps, with lengths 3-40 from the start ("flat") or a length curriculum over the first 1,500 steps
# ("curriculum"). Records: results/state_tracking/issue28/cascade.jsonl (one JSON record per line).
#   bash scripts/experiments/i28_cascade.sh ["VARIANTS"] ["SEEDS"]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
variants=${1:-"flat curriculum"}
seeds=${2:-"0 1 2"}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
out=results/state_tracking/issue28/cascade.jsonl
for seed in $seeds; do
    for variant in $variants; do
        case $variant in
            flat) flags="--curriculum 0" ;;
            curriculum) flags="--curriculum 1500" ;;
            *) echo "unknown variant $variant" >&2; exit 2 ;;
        esac
        json=runs/i28/cascade/${variant}_s${seed}.json
        # shellcheck disable=SC2086
        python scripts/experiments/i28_cascade.py --seed "$seed" --steps 3000 --json "$json" $flags
        python -c "import json, sys; r = json.load(open(sys.argv[1])); r['variant'] = sys.argv[2]; print(json.dumps(r))" "$json" "$variant" >> "$out"
    done
done
