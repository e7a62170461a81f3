"""The accepted values of HybridSSMConfig's choice fields and the checks that name a field in their errors.

Kept apart from configuration_hybrid_ssm.py so that the mixer registry and the mixers can read them without
importing the config (which imports the registry): no import cycle (tests/test_import_graph.py). The one import of
the package is SCAN_BACKENDS from the leaf hf_ssm.ops.checks, where the scan dispatch reads it too.
configuration_hybrid_ssm re-exports every name here.
"""

from __future__ import annotations

import math

# Which implementation runs the scans (hf_ssm/ops/dispatch.py); the environment variable HF_SSM_SCAN_BACKEND overrides.
from hf_ssm.ops.checks import SCAN_BACKENDS as SCAN_BACKENDS

# What the PD-SSM diagonal D may be: both magnitude and phase learnt, magnitude only (arg D = 0), or D = 1.
PD_SSM_DIAGONALS = ("complex", "magnitude", "unit")
PD_SSM_INITIAL_STATES = ("zeros", "one_hot", "head_basis", "learned")
# How PD-SSM makes P_t (pd_ssm_transition) is not listed here: its accepted values are the names of the transition
# modes registered in pd_transitions.py (TRANSITIONS, with each mode's capability flags), the one list of them.
# What PD-SSM adds to the state each step: b_t = B u_t (the paper) or nothing (the state is x_0 moved by A_t alone).
PD_SSM_INPUTS = ("projection", "none")
# How PD-SSM's output map C starts: N(0, initializer_range^2) like every linear map, or the identity.
PD_SSM_OUTPUT_INITS = ("normal", "identity")
# The DEER solvers of the lrc_ssm / gru_ssm / mgu_ssm / lstm_ssm family (`lrc_` / `deer_` fields, docs/design.md §6).
LRC_SOLVERS = ("deer", "sequential")
# The gate normalisations of the bd_lru / h_lru / diag_lru family (`lru_` fields, docs/design.md §5).
LRU_NORMALIZATIONS = ("softmax", "sigmoid_l1", "tanh_l1", "relu_l1", "none")

# How HybridSSMForSequenceClassification pools over time: the last real token, or the mean of real tokens.
CLASSIFIER_POOLING = ("last", "mean")
# The loss of the sequence classifier (transformers' ForSequenceClassificationLoss); None: from num_labels and the
# label dtype, as transformers decides it.
PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")
# What one decoder layer computes around its mixer (docs/design.md §7.1): the package's pre-norm residual block with a
# SwiGLU MLP, or the PD-SSM authors' state-tracking block (post-norm, no residual, no MLP).
# "mixer_mlp": the pre-norm block without the residual around the mixer, so that what follows reads the
# mixer's output only (a one-layer automaton's state, not the token embedding beside it).
# "mixer_only": the mixer alone on the raw stream, no norm, residual or MLP around it; the model's final
# RMSNorm then reads the last mixer's output (a one-layer automaton's states go through a plain RMSNorm to the head).
BLOCK_TYPES = ("pre_norm_residual", "post_norm_mixer", "mixer_mlp", "mixer_only")
BLOCKS_WITH_MLP = ("pre_norm_residual", "mixer_mlp")  # the block types whose layers have a SwiGLU block


def check_positive_int(name: str, value) -> None:
    """ValueError naming field `name` unless `value` is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")


def check_choice(name: str, value, accepted) -> None:
    """Raise ValueError naming field `name` and the accepted values unless `value` is one of them."""
    if value not in accepted:
        raise ValueError(f"`{name}` must be one of {list(accepted)}, got {value!r}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_number(name: str, value, low=None, high=None, low_open=False, high_open=False) -> None:
    """ValueError naming `name` unless `value` is a finite real number in the given (open or closed) range."""
    ok = _is_number(value) and math.isfinite(value)
    ok = ok and (low is None or (value > low if low_open else value >= low))
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"{'<' if high_open else '<='} {high}"
        where = " and ".join(part for part in (lo, hi) if part)
        raise ValueError(f"`{name}` must be a finite number{' ' + where if where else ''}, got {value!r}")
