#!/usr/bin/env bash
# Issue 28, item 2: the default recipe (`table`) on S5 and A5 with more generators, with 32 heads instead of 16
# (the reference automaton learns S5 (k = 2) on seeds 0-2 with 32 heads of N = 8 and on 1 of 3 with 16:
# reference_s5.jsonl). 32 heads of N = 8 need d = 2 H N = 512 (C the identity). One run per seed (--restarts 1),
# far lengths 1,000 and 4,000; records merged into results/state_tracking/summary.json.
#   bash scripts/experiments/i28_layer_s5.sh NAME TASK K "SEEDS" [extra flags]
#   bash scripts/experiments/i28_layer_s5.sh i28_h32_s5_k2 s5 2 "0 1 2 3 4"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name=$1 task=$2 k=$3 seeds=$4
shift 4
exec bash scripts/experiments/default_recipe_seeds.sh "$name" "$task" "$seeds" --num_generators "$k" \
    --num_heads 32 --hidden_size 512 --restarts 1 "$@"
