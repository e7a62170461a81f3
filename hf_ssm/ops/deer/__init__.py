"""The DEER family (docs/design.md §6): a non-linear recurrence x_t = F(x_{t-1}, inputs_t; weights) over a whole
sequence, for the cells of the lrc / gru / mgu / lstm mixers.

    deer_solve(cell, inputs, weights, x0, mask=None, options=None) -> (states (B, T, *S), SolveInfo)

        cell: the cell protocol (``parallel``'s docstring: ``block``, ``step``, optionally ``step_and_jacobian``);
        inputs: per-step tensors, each (B, T, ...) broadcastable against the state; weights: per-channel tensors
        broadcastable against the state (the same at every step); x0 (B, *S) the initial state, S = (D,) or (m, D);
        mask (B, T) bool or None: a False step (padding) is the identity (the state does not change);
        options: ``DEEROptions`` (tolerance, iterations, damping, the scans' backend).

Two implementations, their inputs checked by ``hf_ssm.ops.checks.check_deer_inputs``: ``reference``
(``sequential_rollout``, a plain loop of exact steps with autograd, returning the states; the model runs it too,
for ``lrc_solver="sequential"`` and decoding) and ``parallel`` (``deer_solve``, Newton over the whole sequence with
the implicit gradient). DEER has no kernel of its own: its linear scans are the diag and block families' ops,
through ``hf_ssm.ops.dispatch.scan_ops``, so they run on Triton where the others do.
"""

from .parallel import DEERDivergenceError, DEEROptions, SolveInfo, deer_solve, jacobian_by_jvp, newton_solve
from .reference import sequential_rollout

__all__ = [
    "DEERDivergenceError",
    "DEEROptions",
    "SolveInfo",
    "deer_solve",
    "jacobian_by_jvp",
    "newton_solve",
    "sequential_rollout",
]
