#!/usr/bin/env bash
# RESULTS.md "Learning curves": validation accuracy at lengths 40-256 against the step, every seed thin and the seed
# mean thick, drawn from the records of results/state_tracking/summary.json alone (one series per run family).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
python scripts/plot_state_tracking.py --summary results/state_tracking/summary.json \
  --tasks parity,even_pairs,cycle_navigation,a5,modular_arithmetic \
  --series "PD-SSM, default recipe (table)=experiments/default_" \
  --series "PD-SSM residual, 16 heads=exp14/par_default/" --series "PD-SSM residual, 16 heads=exp14/ep_default/" \
  --series "PD-SSM residual, 16 heads=exp14/cyc_unit_none_h16/" --series "PD-SSM residual, 16 heads=exp14/a5_unit_none_h16/" \
  --series "PD-SSM paper layer, 1 head=exp14/par_base/" --series "PD-SSM paper layer, 1 head=exp14/ep_base/" \
  --series "PD-SSM paper layer, 1 head=exp14/cyc_base/" --series "PD-SSM paper block, N 64, 20k steps=exp14/long/modarith" \
  --series "diag_lru=_diag_lru" --series "bd_lru=_bd_lru" --series "h_lru=_h_lru" --series "attention=_attention" \
  --out results/state_tracking/learning_curves.png
