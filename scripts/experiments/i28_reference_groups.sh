#!/usr/bin/env bash
# Issue 28, item 2: does the minimal straight-through automaton (scripts/reference_automaton.py: 16 heads of N = 8,
# a free logit table per head and token, 2,000 steps, Adam 1e-2) learn the harder groups at all? S5 with k = 2 and
# k = 4 generators, A5 with k = 6; seeds 0-2 first; 1,024 test sequences per bucket over lengths 40-256.
# Records: results/state_tracking/issue28/reference_groups.jsonl (one JSON record per line).
# Usage: scripts/experiments/i28_reference_groups.sh ["SEEDS"] [extra flags of reference_automaton.py]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seeds=${1:-"0 1 2"}
shift || true
export OMP_NUM_THREADS=1
out=results/state_tracking/issue28/reference_groups.jsonl
mkdir -p runs/i28/reference_groups
for case in "s5 2" "s5 4" "a5 6"; do
    read -r task k <<< "$case"
    for seed in $seeds; do
        json=runs/i28/reference_groups/${task}_k${k}_s${seed}.json
        python scripts/reference_automaton.py --task "$task" --num_generators "$k" --seed "$seed" \
            --eval_samples 1024 --json "$json" "$@"
        python -c "import json, sys; r = json.load(open(sys.argv[1])); r = r[-1] if isinstance(r, list) else r; print(json.dumps(r))" "$json" >> "$out"
    done
done
