"""DEER in parallel torch: a non-linear recurrence x_t = F(x_{t-1}, inputs_t) solved over the whole sequence by Newton
(docs/design.md §6); the contract of a solve is written once, in hf_ssm.ops.deer.

Newton on the residual r_t = x_t - F(x_{t-1}) linearises every step around the current iterate x^(i):

    x^(i+1)_t = J_t x^(i+1)_{t-1} + F(x^(i)_{t-1}) - J_t x^(i)_{t-1},    J_t = dF/dx at x^(i)_{t-1}

which is one linear scan per iteration. The cells used here have a Jacobian that is diagonal (block = 1: state
(B, T, D), J (B, T, D)) or block-diagonal with small m x m blocks per channel (block = m: state (B, T, m, D),
J (B, T, m, m, D) with J[..., i, j, :] = dx_i / dx_prev_j, e.g. the diagonal LSTM's (c, h)); so the scan is
``diag_scan`` or ``block_scan``. Block states are planar (slot axis before the channels): every slot and every
Jacobian entry is a contiguous (B, T, D) plane, so the cells and the Newton updates are plain elementwise
passes, never strided gathers or interleaving copies (on CPU those cost more than the arithmetic). The
Jacobian is exact (the cell's analytic one, or forward-mode JVPs with one-hot-per-slot tangents). The linear
scans are the ops of ``hf_ssm.ops.dispatch.scan_ops`` (bound once per solve and backward): the diagonal and block
families' torch scans or Triton kernels, so DEER has no kernel of its own. Padding is the identity at the
cell (F = x_prev, J = I, in ``_evaluate``), so every linear step and the adjoint keep the state there too.

- Stopping: max|x^(i+1) - x^(i)| < tol on an undamped step, or max_iter (then a RuntimeWarning, and the last
  iterate is returned). Independently of tol, T accepted iterations are exact: after i iterations the first i
  steps equal the sequential result, whatever J is used (causality).
- Damping (ELK-style fallback): an iterate that is non-finite or grows past ``max_growth`` times the current
  scale is thrown away and the step is retried with J <- (1 - k) J, each block scaled to infinity-norm <= 1
  (for a diagonal J: clipped to [-1, 1]), so the linear scan cannot blow up. k starts at ``damping`` and moves
  halfway to 1 at every further rejection; k = 1 is the plain fixed-point (Picard) step x^(i+1) = F(x^(i)).
  After an accepted damped step k halves, back to plain Newton (quadratic convergence) once below
  RELAX_TO_NEWTON. The fixed point, hence the answer, does not depend on k, only the speed of convergence.
  If even a Picard step is non-finite, DEERDivergenceError is raised: a solve never returns NaNs silently.
- Returned states: one more exact cell evaluation F(x_{t-1}) at the final iterate (free: the residual needs it).
- Gradient: implicit function theorem at the solution, never backprop through the iterations. With g_t = dL/dx_t,
  lambda_t = g_t + J_{t+1}^T lambda_{t+1} (one reverse scan), then one vector-Jacobian product of F with the
  cotangent lambda gives dL/d(inputs, weights); dL/dx0 = J_0^T lambda_0. Saved for backward: the solution and
  the cell's inputs, so memory does not depend on the number of iterations.

Cell protocol (duck-typed; see hf_ssm/modeling/mixer_lrc.py):
    block: int                                           1 = diagonal Jacobian, m = m x m blocks per channel
    step(x_prev, inputs, weights) -> x                   one exact step; inputs are per-step tensors (B, T, ...)
                                                         or (B, ...), weights broadcast (per channel)
    step_and_jacobian(x_prev, inputs, weights) -> (x, J) optional analytic Jacobian (never differentiated, so it
                                                         may work in place); JVPs of `step` otherwise
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch

from ..checks import check_deer_inputs
from ..dispatch import ScanOps, requested_backend, scan_ops

# Damping below this is dropped (back to plain Newton) after an accepted step.
RELAX_TO_NEWTON = 0.1


class DEERDivergenceError(RuntimeError):
    """Raised when even a fully damped (Picard) DEER step is non-finite: the cell itself overflows."""


@dataclasses.dataclass(frozen=True)
class DEEROptions:
    """Solver settings. tol >= 0 (0 forces max_iter iterations), max_iter >= 1, damping in (0, 1], max_growth > 1."""

    tol: float = 1e-4
    max_iter: int = 100
    damping: float = 0.5
    max_growth: float = 1e3
    scan_backend: str = "auto"  # which implementation runs the linear scans (dispatch.scan_ops)

    def __post_init__(self):
        if not (isinstance(self.tol, (int, float)) and self.tol >= 0):
            raise ValueError(f"`deer_tol` must be a number >= 0, got {self.tol!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise ValueError(f"`deer_max_iter` must be an integer >= 1, got {self.max_iter!r}")
        if not (isinstance(self.damping, (int, float)) and 0 < self.damping <= 1):
            raise ValueError(f"`deer_damping` must be in (0, 1], got {self.damping!r}")
        if not (isinstance(self.max_growth, (int, float)) and self.max_growth > 1):
            raise ValueError(f"`deer_max_growth` must be > 1, got {self.max_growth!r}")
        requested_backend(self.scan_backend)  # validates the setting


@dataclasses.dataclass
class SolveInfo:
    """What one DEER solve did (for logging and tests).

    iterations: Newton steps computed, rejected ones included; residual: max_t |x_t - F(x_{t-1})| at the last
    iterate (the size of the final exact-step correction); delta: max|x^(i+1) - x^(i)| of the last accepted
    step; converged: delta < tol or T accepted steps; rejected: iterates thrown away by the divergence guard;
    damping: k in use at the end (0 = plain Newton).
    """

    iterations: int
    residual: float
    delta: float
    converged: bool
    rejected: int
    damping: float


def _shift(x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """x_{t-1} for every t: (B, T, ...) with x0 in front, last step dropped."""
    return torch.cat([x0.unsqueeze(1), x[:, :-1]], dim=1)


def _keep(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """mask (B, T) -> broadcastable to `like` (B, T, ...)."""
    return None if mask is None else mask.view(*mask.shape, *([1] * (like.dim() - 2)))


def _identity_like(jac: torch.Tensor, block: int) -> torch.Tensor:
    """The identity Jacobian, broadcastable against J (B, T, D) or (B, T, m, m, D)."""
    if block == 1:
        return torch.ones((), dtype=jac.dtype, device=jac.device)
    return torch.eye(block, dtype=jac.dtype, device=jac.device).unsqueeze(-1)


def _transpose(jac: torch.Tensor) -> torch.Tensor:
    """J^T of planar blocks (..., m, m, D)."""
    return jac.transpose(-3, -2)


def jacobian_by_jvp(cell, x_prev: torch.Tensor, inputs, weights) -> tuple[torch.Tensor, torch.Tensor]:
    """(F(x_prev), J) by forward-mode AD. Exact for these cells: the Jacobian couples nothing across channels, so
    one JVP with a tangent of ones (block = 1) returns the diagonal, and for m x m blocks the tangent that is one
    in slot j of every channel returns column j of every block (m JVPs). x_prev (..., D) or (..., m, D)."""

    def f(x):
        return cell.step(x, inputs, weights)

    if cell.block == 1:
        return torch.func.jvp(f, (x_prev,), (torch.ones_like(x_prev),))
    columns = []
    for j in range(cell.block):
        tangent = torch.zeros_like(x_prev)
        tangent[..., j, :] = 1
        fx, col = torch.func.jvp(f, (x_prev,), (tangent,))
        columns.append(col)  # (..., m, D): column j of every block
    return fx, torch.stack(columns, dim=-2)


def _evaluate(cell, x_prev, inputs, weights, mask, jacobian: bool):
    """F and (optionally) J at x_prev (B, T, ...); masked steps are the identity (F = x_prev, J = I)."""
    if not jacobian:
        fx, jac = cell.step(x_prev, inputs, weights), None
    elif hasattr(cell, "step_and_jacobian"):
        fx, jac = cell.step_and_jacobian(x_prev, inputs, weights)
    else:
        fx, jac = jacobian_by_jvp(cell, x_prev, inputs, weights)
    if mask is not None:
        fx = torch.where(_keep(mask, fx), fx, x_prev)
        if jac is not None:
            jac = torch.where(_keep(mask, jac), jac, _identity_like(jac, cell.block))
    return fx, jac


def _apply(jac: torch.Tensor, x: torch.Tensor, block: int) -> torch.Tensor:
    """J x: elementwise (block = 1), or (J x)_i = sum_j J[..., i, j, :] x[..., j, :] over planar blocks."""
    if block == 1:
        return jac * x
    return (jac * x.unsqueeze(-3)).sum(-2)


def _subtract_apply_(out: torch.Tensor, jac: torch.Tensor, x: torch.Tensor, block: int) -> torch.Tensor:
    """out -= J x, in place: one addcmul per diagonal plane, or per block entry (m^2 of them, no temporaries)."""
    if block == 1:
        return out.addcmul_(jac, x, value=-1)
    for i in range(block):
        for j in range(block):
            out[..., i, :].addcmul_(jac[..., i, j, :], x[..., j, :], value=-1)
    return out


def _linear_scan(jac: torch.Tensor, rhs: torch.Tensor, x0: torch.Tensor | None, block: int, ops: ScanOps):
    """States of x_t = J_t x_{t-1} + rhs_t (no autograd), by the bound diagonal or block scan op."""
    with torch.no_grad():
        if block == 1:
            return ops.diag_scan(jac, rhs, x0)[0]
        # block_scan takes (B, T, N, m[, m]): the planar blocks as transposed views, no copy here (the torch scan
        # reads them slot by slot and returns a view of planar memory, so the transpose back is free as well)
        states, _ = ops.block_scan(
            jac.permute(0, 1, 4, 2, 3), rhs.transpose(-1, -2), None if x0 is None else x0.transpose(-1, -2)
        )
    return states.transpose(-1, -2)


def _adjoint_scan(jac: torch.Tensor, g: torch.Tensor, block: int, ops: ScanOps) -> torch.Tensor:
    """lambda_t = g_t + J_{t+1}^T lambda_{t+1} (reverse time), no autograd: the forward scan on reversed time and
    transposed blocks; the first reversed step has nothing before it (identity, zero start)."""
    first = torch.ones_like(jac[:, :1]) if block == 1 else _identity_like(jac, block).expand_as(jac[:, :1])
    rest = jac[:, 1:].flip(1)
    rev = torch.cat([first, rest if block == 1 else _transpose(rest)], dim=1)
    return _linear_scan(rev, g.flip(1), None, block, ops).flip(1)


def _damp(jac: torch.Tensor, k: float, block: int) -> torch.Tensor:
    """(1 - k) J with every block's infinity-norm (max absolute row sum) capped at 1: |J x| <= |x| then."""
    if k == 0:
        return jac
    jac = (1.0 - k) * jac
    if block == 1:
        return jac.clamp(-1.0, 1.0)
    norm = jac.abs().sum(-2).amax(-2)  # (..., D): max over rows i of sum_j |J[i, j]|
    return jac / norm.clamp(min=1.0)[..., None, None, :]


def _max_abs(t: torch.Tensor) -> torch.Tensor:
    """max|t| in one pass without a temporary; NaN if t has a NaN."""
    lo, hi = torch.aminmax(t)
    return torch.maximum(hi, -lo)


def newton_solve(
    cell, inputs, weights, x0: torch.Tensor, mask: torch.Tensor | None, options: DEEROptions
) -> tuple[torch.Tensor, SolveInfo]:
    """The DEER iterations, without autograd. x0 (B, *S); returns (states (B, T, *S), info)."""
    block = cell.block
    steps = inputs[0].shape[1]
    ops = scan_ops(options.scan_backend, x0.device)
    x = x0.new_zeros((x0.shape[0], steps, *x0.shape[1:]))
    prev = _shift(x, x0)  # x_{t-1} of the current iterate; updated in place
    fx, jac = _evaluate(cell, prev, inputs, weights, mask, jacobian=True)
    k, accepted, rejected, iterations = 0.0, 0, 0, 0
    delta, converged, x_max = math.inf, False, 0.0
    while iterations < options.max_iter:
        iterations += 1
        jt = _damp(jac, k, block)
        fx_max = _max_abs(fx)
        # rhs = F(x_{t-1}) - J x_{t-1}, built in fx's storage (fx is recomputed if this step is rejected).
        rhs = _subtract_apply_(fx, jt, prev, block)
        x_new = _linear_scan(jt, rhs, x0, block, ops)
        # One host sync per iteration: max|x_new| (NaN if not finite), max|F|, max|x_new - x|.
        new_max, scale, step = torch.stack([_max_abs(x_new), fx_max, _max_abs(torch.sub(x_new, x, out=rhs))]).tolist()
        if not math.isfinite(new_max) or new_max > options.max_growth * (1.0 + max(scale, x_max)):
            rejected += 1
            if k >= 1.0:
                raise DEERDivergenceError(
                    "DEER: the cell returned non-finite values even for an undamped fixed-point step "
                    f"(iteration {iterations}); the inputs or parameters are non-finite or overflow"
                )
            k = options.damping if k == 0 else 0.5 * (1.0 + k)
            k = 1.0 if k > 0.99 else k
            fx, jac = _evaluate(cell, prev, inputs, weights, mask, jacobian=True)
            continue
        x, delta, x_max = x_new, step, new_max
        accepted += 1
        # Only an undamped (Newton) step is a reliable stop test: damped steps converge linearly, so a small
        # step there can sit far from the solution. After a damped step is accepted, relax k towards Newton.
        converged = (delta < options.tol and k == 0) or accepted >= steps
        k = 0.0 if k < RELAX_TO_NEWTON else 0.5 * k
        prev[:, 1:] = x[:, :-1]
        fx, jac = _evaluate(cell, prev, inputs, weights, mask, jacobian=not converged)
        if converged:
            break
    residual = _max_abs(x - fx).item()
    if not math.isfinite(residual):
        raise DEERDivergenceError(
            "DEER: the cell is non-finite at the final iterate; the inputs or parameters overflow"
        )
    info = SolveInfo(iterations, residual, delta, converged, rejected, k)
    if not converged:
        warnings.warn(
            f"DEER did not converge in deer_max_iter = {options.max_iter} iterations "
            f"(last max|dx| = {delta:.3g}, residual = {residual:.3g}, tol = {options.tol}); "
            "the output is the last iterate. Raise `deer_max_iter` or use `lrc_solver='sequential'`.",
            RuntimeWarning,
            stacklevel=3,
        )
    return fx, info


class _DEERFunction(torch.autograd.Function):
    """Forward: Newton solve. Backward: implicit function theorem at the solution (see module docstring)."""

    @staticmethod
    def forward(ctx, cell, options, info_box, n_inputs, x0, mask, *tensors):
        inputs, weights = tensors[:n_inputs], tensors[n_inputs:]
        states, info = newton_solve(cell, inputs, weights, x0, mask, options)
        info_box.append(info)
        ctx.cell, ctx.n_inputs, ctx.has_mask = cell, n_inputs, mask is not None
        ctx.scan_backend = options.scan_backend
        ctx.save_for_backward(x0, states, mask if mask is not None else x0.new_empty(0), *tensors)
        return states

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states):
        x0, states, mask, *tensors = ctx.saved_tensors
        cell, block = ctx.cell, ctx.cell.block
        mask = mask if ctx.has_mask else None
        x_prev = _shift(states, x0)
        needs = ctx.needs_input_grad[6:]
        _, jac = _evaluate(cell, x_prev, tensors[: ctx.n_inputs], tensors[ctx.n_inputs :], mask, jacobian=True)
        lam = _adjoint_scan(jac, grad_states, block, scan_ops(ctx.scan_backend, x0.device))
        grads = [None] * len(tensors)
        wanted = [i for i, need in enumerate(needs) if need]
        if wanted:
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(need) for t, need in zip(tensors, needs)]
                fx, _ = _evaluate(cell, x_prev, leaves[: ctx.n_inputs], leaves[ctx.n_inputs :], mask, jacobian=False)
                found = torch.autograd.grad(fx, [leaves[i] for i in wanted], lam, allow_unused=True)
            for i, g in zip(wanted, found):
                grads[i] = g if g is not None else torch.zeros_like(tensors[i])
        grad_x0 = None
        if ctx.needs_input_grad[4]:  # dL/dx0 = J_0^T lambda_0
            grad_x0 = _apply(_transpose(jac[:, 0]) if block > 1 else jac[:, 0], lam[:, 0], block)
        return None, None, None, None, grad_x0, None, *grads


def deer_solve(
    cell,
    inputs: tuple[torch.Tensor, ...],
    weights: tuple[torch.Tensor, ...],
    x0: torch.Tensor,
    mask: torch.Tensor | None = None,
    options: DEEROptions | None = None,
) -> tuple[torch.Tensor, SolveInfo]:
    """``hf_ssm.ops.deer.deer_solve``: Newton over the whole sequence, differentiable by the implicit gradient.
    Returns (states (B, T, *S), SolveInfo)."""
    options = options or DEEROptions()
    check_deer_inputs(cell.block, inputs, x0, mask)
    info_box: list[SolveInfo] = []
    states = _DEERFunction.apply(cell, options, info_box, len(inputs), x0, mask, *inputs, *weights)
    return states, info_box[0]


__all__ = [
    "DEERDivergenceError",
    "DEEROptions",
    "SolveInfo",
    "deer_solve",
    "jacobian_by_jvp",
    "newton_solve",
]
