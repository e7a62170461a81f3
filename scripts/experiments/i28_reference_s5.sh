#!/usr/bin/env bash
# Issue 28, item 2: the minimal straight-through automaton (scripts/reference_automaton.py) does not learn S5 with
# 2 generators at its A5 settings (16 heads of N = 8, 2,000 steps: 8.9 / 49.8 / 11.4 % on seeds 0-2,
# reference_groups.jsonl). One change at a time, seeds 0-2, 1,024 test sequences per bucket over lengths 40-256:
#   steps6000   three times the training (the loss may still be falling at 2,000)
#   heads32     twice the heads (more independent searches for a faithful action on 5 or 6 points)
#   states16    N = 16 per head (not run: heads32 learnt 3 of 3 first)
# Records: results/state_tracking/issue28/reference_s5.jsonl (one JSON record per line, "variant" added).
# Usage: scripts/experiments/i28_reference_s5.sh ["VARIANTS"] ["SEEDS"] [K, generators: 2]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
variants=${1:-"steps6000 heads32"}
seeds=${2:-"0 1 2"}
k=${3:-2}
export OMP_NUM_THREADS=1
out=results/state_tracking/issue28/reference_s5.jsonl
mkdir -p runs/i28/reference_s5
for variant in $variants; do
    case $variant in
        steps6000) flags="--steps 6000" ;;
        heads32) flags="--heads 32" ;;
        states16) flags="--states 16" ;;
        *) echo "unknown variant $variant" >&2; exit 2 ;;
    esac
    for seed in $seeds; do
        json=runs/i28/reference_s5/${variant}_k${k}_s${seed}.json
        # shellcheck disable=SC2086
        python scripts/reference_automaton.py --task s5 --num_generators "$k" --seed "$seed" --eval_samples 1024 \
            --json "$json" $flags
        python -c "import json, sys; r = json.load(open(sys.argv[1])); r = r[-1] if isinstance(r, list) else r; r['variant'] = sys.argv[2]; print(json.dumps(r))" "$json" "$variant" >> "$out"
    done
done
