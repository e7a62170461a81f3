"""PD-SSM's scan ops (docs/design.md §4): one public function per way of making P_t, one signature each.

    op(selection, matrices, dv, b, initial_state=None, mask=None, *, temperature=1.0, backend="auto")
        -> (states (B, T, H, N) complex64, final state (B, H, N) complex64)

- ``pd_dictionary_scan``: selection = the weights s_t (B, T, H, K), matrices = the dictionary M (H, K, N, N);
  P_t = column argmax of M_t = sum_k s_t,k M_k (the paper).
- ``pd_bank_scan``: selection = logits (B, T, H, K), matrices = score matrices (H, K, N, N); P_k = column argmax of
  score_k once per call, P_t = P_{argmax_k logits_t,k} (after Flash PD-SSM, arXiv 2605.19150).
- ``pd_scan``: P_t given as indices (B, T, H, N) (with an optional dense ``p_soft`` receiving its gradient).

Both generated ops are straight-through: the hard choices in the forward, the gradients of softmax(. / tau) (down
each column of an N x N matrix, across the K logits) in the backward. dv, b, initial_state are complex (or real
(..., 2) pairs). mask (B, T) bool: a False step is the identity transition with zero input and passes no gradient to
its P; it is applied once, inside each implementation. The torch implementations are the references; the Triton ones
(``hf_ssm.kernels``, optional) are picked by ``scan_dispatch.resolve_backend``; ``bind_pd_op`` returns the
implementation for a device once, for a mixer to keep.

The torch dictionary op never holds more than one chunk of tokens' N x N matrices: the forward keeps only idx,
and the backward recomputes M_t and its column softmax chunk by chunk, so its memory is Theta(T H (N + K)). The
torch bank op computes the K column argmaxes once per call and gathers idx_t from them. A single step without
gradient (decode) is one O(H N) update.
``pd_dictionary_reference`` / ``pd_bank_reference`` are dense plain-autograd loops, for tests only.
"""

from __future__ import annotations

import contextlib
import math

import torch

from .configuration_hybrid_ssm import check_choice
from .scan_common import check_mask, default_chunk_size, step_where_kept, where_kept
from .scan_dispatch import _load_kernels, kernel_dtype_problem, requested_backend, resolve_backend
from .scan_pd import _scatter_scan_chunked, pd_scan_backward
from .scan_pd import pd_scan as torch_pd_scan

# The transitions generated inside an op (the mixer's "direct" transition calls pd_scan on its own P_t instead).
GENERATED_TRANSITIONS = ("dictionary", "bank")
# Elements of one chunk of (H, rows, N, N) matrices in the dictionary op (1 MiB of float32, cache-sized).
GEN_CHUNK_ELEMENTS = 1 << 18
_NO_CONTEXT = contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------------------------
# shared pieces


def _as_complex(t: torch.Tensor | None) -> torch.Tensor | None:
    """complex64, from complex or from real (..., 2) pairs."""
    if t is None or t.dtype == torch.complex64:
        return t
    if t.is_complex():
        return t.to(torch.complex64)
    return torch.view_as_complex(t.float().contiguous())


def _as_float(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.float()


def _mask_inputs(dv: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None):
    """Padded steps: dv = 1, b = 0 (with the identity P, set by each implementation, the state is unchanged)."""
    if mask is None:
        return dv, b
    one, zero = (torch.full((), v, dtype=dv.dtype, device=dv.device) for v in (1, 0))
    return where_kept(mask, dv, one), where_kept(mask, b, zero)


def _identity_where_masked(idx: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Padded steps: idx = j, the identity permutation."""
    if mask is None:
        return idx
    return where_kept(mask, idx, torch.arange(idx.shape[-1], device=idx.device))


def _check(name: str, selection, matrices, dv, b, x0, mask, temperature):
    if selection.dim() != 4:
        raise ValueError(f"{name}: the selection must have shape (B, T, H, K), got {tuple(selection.shape)}")
    batch, steps, heads, k = selection.shape
    if matrices.dim() != 4 or tuple(matrices.shape[:2]) != (heads, k) or matrices.shape[2] != matrices.shape[3]:
        raise ValueError(
            f"{name}: matrices must have shape (H, K, N, N) = ({heads}, {k}, N, N), got {tuple(matrices.shape)}"
        )
    n = matrices.shape[-1]
    for label, t in (("dv", dv), ("b", b)):
        if tuple(t.shape) != (batch, steps, heads, n):
            raise ValueError(
                f"{name}: {label} must have shape (B, T, H, N) = {(batch, steps, heads, n)}, got {tuple(t.shape)}"
            )
    if x0 is not None and tuple(x0.shape) != (batch, heads, n):
        raise ValueError(f"{name}: initial_state must have shape {(batch, heads, n)}, got {tuple(x0.shape)}")
    check_mask(mask, batch, steps, op=name)
    if steps == 0:
        raise ValueError(f"{name}: needs at least one time step (T >= 1)")
    if not temperature > 0:
        raise ValueError(f"{name}: temperature must be > 0, got {temperature!r}")


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _scan_no_grad(idx, dv, b, x0):
    """Forward only, T > 1 (a single step goes through ``_decode_step``)."""
    states = _scatter_scan_chunked(idx, dv, b, x0, default_chunk_size(idx.shape[1]))
    return states, states[:, -1]


def _is_decode_step(selection, matrices, dv, b, x0) -> bool:
    return selection.shape[1] == 1 and not _needs_grad(selection, matrices, dv, b, x0)


def _decode_step(step_indices, selection, matrices, dv, b, x0, mask):
    """One step without gradient (T = 1, decode): x = P D x0 + b, one O(H N) update once P is chosen, and no
    chunk machinery. A masked-out row keeps x0 (the identity transition with zero input). step_indices maps
    (selection (B, 1, H, K) float32, matrices (H, K, N, N) float32) to idx (B, H, N). Returns ((B, 1, H, N), (B, H, N))."""
    # The generator runs in float32 (like the chunked ops), also inside an autocast region.
    off = torch.autocast(dv.device.type, enabled=False) if torch.is_autocast_enabled(dv.device.type) else _NO_CONTEXT
    with off:
        idx = step_indices(_as_float(selection), _as_float(matrices))
        if torch.compiler.is_compiling():
            return _decode_step_in_pairs(idx, dv, b, x0, mask)
        dv, b = _as_complex(dv)[:, 0], _as_complex(b)[:, 0]
        x0 = torch.zeros_like(b) if x0 is None else _as_complex(x0)
        x = step_where_kept(mask, b.clone().scatter_add_(-1, idx, dv * x0), x0)  # b + P D x0
        return x.unsqueeze(1), x


def _as_pairs(t: torch.Tensor) -> torch.Tensor:
    """float32 (..., 2) (re, im) pairs, from complex (a view) or from real pairs."""
    return torch.view_as_real(t) if t.is_complex() else _as_float(t)


def _decode_step_in_pairs(idx, dv, b, x0, mask):
    """``_decode_step``'s update b + P D x0 in real (re, im) pairs, for torch.compile (inductor generates no code
    for complex operators, which would then run one by one in eager). Returns complex64 like the eager step."""
    dv, b = _as_pairs(dv)[:, 0], _as_pairs(b)[:, 0]  # (B, H, N, 2)
    x0 = torch.zeros_like(b) if x0 is None else _as_pairs(x0)
    (dr, di), (xr, xi) = dv.unbind(-1), x0.unbind(-1)
    rotated = torch.stack((dr * xr - di * xi, dr * xi + di * xr), dim=-1)
    x = b.clone().scatter_add_(-2, idx.unsqueeze(-1).expand_as(rotated), rotated)
    x = torch.view_as_complex(step_where_kept(mask, x, x0).contiguous())
    return x.unsqueeze(1), x


def _column_softmax_backward(s: torch.Tensor, g: torch.Tensor, temperature: float) -> torch.Tensor:
    """Gradient w.r.t. M of softmax(M / tau) down each column (dim -2), given s = that softmax and its gradient g.
    Overwrites g."""
    g.sub_((s * g).sum(-2, keepdim=True)).mul_(s)
    return g.div_(temperature) if temperature != 1.0 else g


# ---------------------------------------------------------------------------------------------------------------
# dictionary mode, torch
#
# The generator works on the tokens r = (b, t) flattened, a chunk of them at a time, with every N x N matrix
# transposed (row j = column j of M_t) so that the argmax and the softmax down a column run over contiguous memory:
# Mt (H, R, N, N) = sel (H, R, K) @ dictionary^T (H, K, N*N). A chunk (GEN_CHUNK_ELEMENTS) stays in cache through
# its few passes.


def _gen_rows(heads: int, n: int) -> int:
    return max(1, GEN_CHUNK_ELEMENTS // (heads * n * n))


def _by_head(t: torch.Tensor) -> torch.Tensor:
    """(B, T, H, ...) -> (H, B*T, ...), a view."""
    return t.flatten(0, 1).transpose(0, 1)


def _transposed_flat(dictionary: torch.Tensor) -> torch.Tensor:
    """(H, K, N, N) -> (H, K, N*N) with entry [j*N + i] = M_k[i, j]."""
    return dictionary.transpose(-1, -2).flatten(2)


def _leading(buffer: torch.Tensor, *shape: int) -> torch.Tensor:
    """The first prod(shape) elements of a flat chunk buffer as a contiguous tensor of that shape (a view)."""
    return buffer[: math.prod(shape)].view(shape)


def dictionary_indices(sel, dictionary, mask=None):
    """idx (B, T, H, N) = argmax_i M_t[i, j] with M_t = sum_k sel[..., k] dictionary[h, k], a chunk at a time.

    The argmax is the first of tied maxima (like torch.argmax), found with in-place passes over the chunk
    (torch.argmax over a short last axis is several times slower on CPU): m >= max is 1 exactly at the maxima, so
    lane - N * [maximum] is smallest at the first one, and its minimum + N is that lane (exact in float32, N < 2^24).
    """
    batch, steps, heads, _ = sel.shape
    n = dictionary.shape[-1]
    flat_t = _transposed_flat(dictionary)
    rows = min(_gen_rows(heads, n), batch * steps)
    # One chunk buffer, re-used (fresh megabyte tensors per chunk cost more in page faults than the arithmetic).
    buf = sel.new_empty(heads * rows * n * n)
    lanes = torch.arange(n, dtype=torch.float32, device=sel.device)
    idx = sel.new_empty(heads, batch * steps, n)  # lane - N of the first maximum, in float
    for sel_c, idx_c in zip(_by_head(sel).split(rows, 1), idx.split(rows, 1)):
        m = torch.bmm(sel_c, flat_t, out=_leading(buf, heads, sel_c.shape[1], n * n)).view(heads, -1, n, n)
        torch.ge(m, torch.amax(m, -1, keepdim=True), out=m)
        torch.amin(torch.add(lanes, m, alpha=-n, out=m), -1, out=idx_c)
    idx = idx.add_(n).transpose(0, 1).reshape(batch, steps, heads, n).long()
    return _identity_where_masked(idx, mask)


def _dictionary_st_backward(sel, dictionary, lam, z, temperature):
    """(dL/dsel (B, T, H, K), dL/ddictionary (H, K, N, N)) of the straight-through generator, a chunk at a time.

    dL/dP_t = G_t = Re(conj(lam_t) z_t^T), G_t[i, j] = lr_i zr_j + li_i zi_j, a rank-2 product. With S_t the
    column softmax of M_t / tau: dL/dM_t = S_t * (G_t - c_t) / tau, c_t[j] = sum_i S_t[i, j] G_t[i, j]; then
    dL/ds_t,k = <dL/dM_t, M_k> and dL/dM_k = sum_t s_t,k dL/dM_t, batched products over the flattened N*N.
    """
    batch, steps, heads, k = sel.shape
    n = dictionary.shape[-1]
    flat_t = _transposed_flat(dictionary)
    scaled = flat_t / temperature
    grad_sel = sel.new_empty(heads, batch * steps, k)
    grad_flat = torch.zeros_like(flat_t)
    rows = min(_gen_rows(heads, n), batch * steps)
    buf_m, buf_s, buf_p = (sel.new_empty(heads * rows * n * n) for _ in range(3))
    chunks = zip(
        *(t.split(rows, 1) for t in (_by_head(sel), _by_head(torch.view_as_real(lam)), _by_head(torch.view_as_real(z))))
    )
    for (sel_c, lam_c, z_c), grad_sel_c in zip(chunks, grad_sel.split(rows, 1)):
        rc = sel_c.shape[1]
        mt = torch.bmm(sel_c, scaled, out=_leading(buf_m, heads, rc, n * n)).view(heads, rc, n, n)
        st = torch.softmax(mt, -1, out=_leading(buf_s, heads, rc, n, n))  # st[j, i] = S_t[i, j], a contiguous softmax
        # G_t^T, written over M_t: one (N, 2) @ (2, N) product per token and head (a copy of 2N floats when H > 1)
        z_c, lam_c = z_c.reshape(heads * rc, n, 2), lam_c.reshape(heads * rc, n, 2)
        gt = torch.bmm(z_c, lam_c.transpose(1, 2), out=mt.view(heads * rc, n, n)).view(heads, rc, n, n)
        c = torch.mul(gt, st, out=_leading(buf_p, heads, rc, n, n)).sum(-1, keepdim=True)
        g = gt.sub_(c).mul_(st).view(heads, rc, n * n)  # tau dL/dM_t^T
        torch.bmm(g, flat_t.transpose(-1, -2), out=grad_sel_c)
        grad_flat.baddbmm_(sel_c.transpose(-1, -2), g)
    grad_sel = grad_sel.div_(temperature).transpose(0, 1).reshape(batch, steps, heads, k)
    grad_dict = grad_flat.div_(temperature).unflatten(-1, (n, n)).transpose(-1, -2)
    return grad_sel, grad_dict


class _DictionaryScan(torch.autograd.Function):
    """Generation (column argmax of sum_k s_k M_k), scan and straight-through backward in one node."""

    @staticmethod
    def forward(ctx, sel, dictionary, dv, b, x0, mask, temperature):
        idx = dictionary_indices(sel, dictionary, mask)
        chunk = default_chunk_size(idx.shape[1])
        states = _scatter_scan_chunked(idx, dv, b, x0, chunk)
        ctx.save_for_backward(sel, dictionary, idx, dv, x0, states, mask)
        ctx.chunk, ctx.temperature = chunk, temperature
        return states, states[:, -1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        sel, dictionary, idx, dv, x0, states, mask = ctx.saved_tensors
        lam, grad_dv, grad_x0, x_prev = pd_scan_backward(idx, dv, x0, states, grad_states, grad_final, ctx.chunk)
        grad_sel = grad_dict = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            z = dv * x_prev
            if mask is not None:  # a padded step's P is the identity, not generated: no gradient
                z = z * mask.view(*mask.shape, 1, 1)
            grad_sel, grad_dict = _dictionary_st_backward(sel, dictionary, lam, z, ctx.temperature)
        return grad_sel, grad_dict, grad_dv, lam, grad_x0, None, None


def _dictionary_step_indices(sel, dictionary):
    """idx (B, H, N) of one step: the column argmax of M = sum_k sel[:, 0, h, k] dictionary[h, k] (the first of
    tied maxima, as ``dictionary_indices``). The dictionary is used as stored, without the transposed copy."""
    heads, k, n = dictionary.shape[:3]
    if heads == 1:  # one 2-D product (B, K) @ (K, N*N): cheaper to dispatch than the batched one
        m = torch.mm(sel.reshape(-1, k), dictionary.reshape(k, n * n))
        return m.view(-1, 1, n, n).argmax(-2)
    m = torch.matmul(_by_head(sel), dictionary.flatten(2))  # (H, B, N*N), entry i*N + j = M[i, j]
    return m.view(heads, -1, n, n).argmax(-2).transpose(0, 1)


def _torch_dictionary(sel, dictionary, dv, b, x0, mask, temperature):
    if _is_decode_step(sel, dictionary, dv, b, x0):
        return _decode_step(_dictionary_step_indices, sel, dictionary, dv, b, x0, mask)
    with torch.autocast(device_type=dv.device.type, enabled=False):
        sel, dictionary = sel.float(), dictionary.float()
        dv, b = _mask_inputs(_as_complex(dv), _as_complex(b), mask)
        x0 = torch.zeros_like(b[:, 0]) if x0 is None else _as_complex(x0)
        if not _needs_grad(sel, dictionary, dv, b, x0):
            return _scan_no_grad(dictionary_indices(sel, dictionary, mask), dv, b, x0)
        return _DictionaryScan.apply(sel, dictionary, dv, b, x0, mask, float(temperature))


# ---------------------------------------------------------------------------------------------------------------
# bank mode, torch


def bank_indices(scores: torch.Tensor) -> torch.Tensor:
    """The bank (H, K, N) int64: column j of P_k has its 1 in row bank[h, k, j] = argmax_i scores[h, k, i, j]."""
    return scores.argmax(dim=-2)


def gather_bank(bank: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """idx (B, T, H, N) = bank[h, choice[b, t, h]], an index gather from the (H*K, N) table."""
    heads, k, n = bank.shape
    rows = choice + k * torch.arange(heads, device=choice.device)
    return bank.reshape(heads * k, n)[rows.reshape(-1)].view(*choice.shape, n)


def _bank_outer_sums(lam, z, choice, k):
    """dL/dP_k = sum over steps with choice = k of Re(conj(lam_t) z_t^T): (H, K, N, N), Theta(T N^2) in all.

    Steps are grouped by their choice (a stable sort per head), and each group is one (N x 2n) @ (2n x N) product.
    """
    batch, steps, heads, n = lam.shape
    lam_r = torch.view_as_real(lam).transpose(-1, -2)  # (B, T, H, 2, N)
    z_r = torch.view_as_real(z).transpose(-1, -2)
    out = lam_r.new_zeros(heads, k, n, n)
    if torch.compiler.is_compiling():
        # The groups' sizes depend on the data (a graph break under torch.compile): sum the per-step outer
        # products into their choice instead, the same sums at Theta(B T N^2) memory.
        for h in range(heads):
            outer = torch.einsum("sci,scj->sij", lam_r[:, :, h].reshape(-1, 2, n), z_r[:, :, h].reshape(-1, 2, n))
            out[h].index_add_(0, choice[:, :, h].reshape(-1), outer)
        return out
    for h in range(heads):
        ch = choice[:, :, h].reshape(-1)
        order = torch.argsort(ch, stable=True)
        counts = torch.bincount(ch, minlength=k).tolist()
        lh = lam_r[:, :, h].reshape(-1, 2, n)[order].split(counts)
        zh = z_r[:, :, h].reshape(-1, 2, n)[order].split(counts)
        for kk in range(k):
            if counts[kk]:
                out[h, kk] = lh[kk].reshape(-1, n).T @ zh[kk].reshape(-1, n)
    return out


def bank_straight_through_grads(logits, scores, choice, lam, z, mask, temperature, need_logits=True, need_scores=True):
    """(dL/dlogits (B, T, H, K) or None, dL/dscores (H, K, N, N) or None) of the bank transitions, given the
    adjoint lam_t = dL/dx_t and z_t = dv_t * x_{t-1} (B, T, H, N) complex, choice = argmax logits (B, T, H).

    With G_t = Re(conj(lam_t) z_t^T) = dL/dP_t: dL/de_t,k = <G_t, P_k> goes through the softmax(logits / tau)
    Jacobian, and dL/dP_k = sum_{t: k_t = k} G_t through the column softmax of scores_k / tau. Padded steps
    (mask False) pass nothing. Shared by the torch op and the Triton kernel's backward.
    """
    if mask is not None:
        z = z * mask.view(*mask.shape, 1, 1)
    grad_logits = grad_scores = None
    if need_logits:
        grad_e = _bank_choice_grad(lam, z, bank_indices(scores))
        p = torch.softmax(logits / temperature, dim=-1)
        grad_logits = p * (grad_e - (p * grad_e).sum(-1, keepdim=True)) / temperature
    if need_scores:
        s = torch.softmax(scores / temperature, dim=-2)
        grad_scores = _column_softmax_backward(s, _bank_outer_sums(lam, z, choice, scores.shape[1]), temperature)
    return grad_logits, grad_scores


class _BankScan(torch.autograd.Function):
    """Bank selection (argmax of the logits, a gather from the column argmax of each score matrix), scan and
    straight-through backward in one node."""

    @staticmethod
    def forward(ctx, logits, scores, dv, b, x0, mask, temperature):
        bank = bank_indices(scores)
        choice = logits.argmax(dim=-1)
        idx = _identity_where_masked(gather_bank(bank, choice), mask)
        chunk = default_chunk_size(idx.shape[1])
        states = _scatter_scan_chunked(idx, dv, b, x0, chunk)
        ctx.save_for_backward(logits, scores, choice, idx, dv, x0, states, mask)
        ctx.chunk, ctx.temperature = chunk, temperature
        return states, states[:, -1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        logits, scores, choice, idx, dv, x0, states, mask = ctx.saved_tensors
        tau = ctx.temperature
        lam, grad_dv, grad_x0, x_prev = pd_scan_backward(idx, dv, x0, states, grad_states, grad_final, ctx.chunk)
        grad_logits, grad_scores = bank_straight_through_grads(
            logits, scores, choice, lam, dv * x_prev, mask, tau, ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        )
        return grad_logits, grad_scores, grad_dv, lam, grad_x0, None, None


def _bank_choice_grad(lam: torch.Tensor, z: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """dL/de_t,k = <G_t, P_k> = sum_j Re(conj(lam_t[bank_k[j]]) z_t[j]): (B, T, H, K), one index gather of N
    entries per token and bank entry."""
    batch, steps, heads, n = lam.shape
    lam_r = torch.view_as_real(lam).reshape(batch, steps, heads * n, 2)
    z_r = torch.view_as_real(z).reshape(batch, steps, heads, 2 * n)
    rows = bank + n * torch.arange(heads, device=bank.device).view(heads, 1, 1)  # (H, K, N) into the H*N axis
    out = lam_r.new_empty(batch, steps, heads, bank.shape[1])
    for kk in range(bank.shape[1]):
        picked = lam_r.index_select(2, rows[:, kk].reshape(-1)).view(batch, steps, heads, 2 * n)
        out[..., kk] = picked.mul_(z_r).sum(-1)
    return out


def _bank_step_indices(logits, scores):
    """idx (B, H, N) of one step: bank entry argmax_k logits[:, 0, h, k] of the column argmaxes of the scores."""
    return gather_bank(bank_indices(scores), logits[:, 0].argmax(dim=-1))


def _torch_bank(logits, scores, dv, b, x0, mask, temperature):
    if _is_decode_step(logits, scores, dv, b, x0):
        return _decode_step(_bank_step_indices, logits, scores, dv, b, x0, mask)
    with torch.autocast(device_type=dv.device.type, enabled=False):
        logits, scores = logits.float(), scores.float()
        dv, b = _mask_inputs(_as_complex(dv), _as_complex(b), mask)
        x0 = torch.zeros_like(b[:, 0]) if x0 is None else _as_complex(x0)
        if not _needs_grad(logits, scores, dv, b, x0):
            idx = _identity_where_masked(gather_bank(bank_indices(scores), logits.argmax(dim=-1)), mask)
            return _scan_no_grad(idx, dv, b, x0)
        return _BankScan.apply(logits, scores, dv, b, x0, mask, float(temperature))


# ---------------------------------------------------------------------------------------------------------------
# implementations and the public ops


def _triton_dictionary(selection, matrices, dv, b, initial_state=None, mask=None, temperature=1.0):
    return _load_kernels()[0].pd_generated_scan(
        selection, matrices, dv, b, initial_state, temperature=temperature, mask=mask
    )


def _triton_bank(selection, matrices, dv, b, initial_state=None, mask=None, temperature=1.0):
    return _load_kernels()[0].pd_bank_scan(
        selection, matrices, dv, b, initial_state, temperature=temperature, mask=mask
    )


_IMPLS = {
    ("dictionary", "torch"): _torch_dictionary,
    ("bank", "torch"): _torch_bank,
    ("dictionary", "triton"): _triton_dictionary,
    ("bank", "triton"): _triton_bank,
}


def bind_pd_op(transition: str, setting: str | None, device: torch.device | str):
    """The implementation of the `transition` op ("dictionary" or "bank") that `setting` (a scan_backend value,
    overridden by HF_SSM_SCAN_BACKEND) selects on `device`; called as op(selection, matrices, dv, b, initial_state,
    mask, temperature)."""
    # "direct" (the third pd_ssm_transition) has no generator op: its mixer calls pd_scan on its own P_t
    check_choice("pd_ssm_transition", transition, GENERATED_TRANSITIONS)
    return _IMPLS[transition, resolve_backend(setting, device)]


def bound_op_key(setting: str | None, device: torch.device | str):
    """What a bound op depends on: the device and the requested backend (the environment override included)."""
    return torch.device(device), requested_backend(setting)[0]


def _public(transition: str, selection, matrices, dv, b, initial_state, mask, temperature, backend):
    """The op pd_<transition>_scan: check the inputs, pick the implementation for these inputs and `backend`."""
    name = f"pd_{transition}_scan"
    _check(name, selection, matrices, _as_shape(dv), _as_shape(b), _as_shape(initial_state), mask, temperature)
    problem = kernel_dtype_problem(selection, matrices, dv, b, initial_state)
    impl = _IMPLS[transition, resolve_backend(backend, dv.device, problem)]
    return impl(selection, matrices, dv, b, initial_state, mask, temperature)


def _as_shape(t):
    """A shape stand-in: complex tensors as they are, real pairs without their trailing 2."""
    if t is None or t.is_complex():
        return t
    if t.shape[-1] != 2:
        raise ValueError(f"a real dv / b / initial_state must end in a (real, imag) axis of 2, got {tuple(t.shape)}")
    return t[..., 0]


def pd_dictionary_scan(
    selection: torch.Tensor,
    dictionary: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    backend: str | None = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """PD scan with P_t = column argmax of sum_k selection[..., k] dictionary[h, k] (straight-through).

    selection (B, T, H, K) weights (softmax of the selection logits); dictionary (H, K, N, N); dv, b (B, T, H, N)
    complex; initial_state (B, H, N) or None (zeros); mask (B, T) bool or None. Returns (states, final).
    """
    return _public("dictionary", selection, dictionary, dv, b, initial_state, mask, temperature, backend)


def pd_bank_scan(
    logits: torch.Tensor,
    scores: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    backend: str | None = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """PD scan with P_t = P_{k_t}, k_t = argmax_k logits[..., k], P_k = column argmax of scores[h, k].

    Straight-through in both choices: softmax(logits / temperature) for k_t, softmax(scores[h, k] / temperature)
    down each column for P_k. logits (B, T, H, K); scores (H, K, N, N); the rest as ``pd_dictionary_scan``.
    """
    return _public("bank", logits, scores, dv, b, initial_state, mask, temperature, backend)


def pd_scan(
    idx: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    p_soft: torch.Tensor | None = None,
    *,
    backend: str | None = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """PD scan of given transitions (idx (B, T, H, N) int64, dv, b complex or real pairs), see ``scan_pd.pd_scan``;
    p_soft (B, T, H, N, N) optionally receives the straight-through gradient of P_t."""
    if resolve_backend(backend, dv.device, kernel_dtype_problem(dv)) == "triton":
        return _load_kernels()[0].pd_scan(idx, dv, b, initial_state, p_soft)
    return torch_pd_scan(idx, _as_complex(dv), _as_complex(b), _as_complex(initial_state), p_soft)


# ---------------------------------------------------------------------------------------------------------------
# dense plain-autograd references (tests only)


def _straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    return hard + (soft - soft.detach())


def _dense_scan(p, dv, b, x0, mask):
    """x_t = P_t (dv_t * x_{t-1}) + b_t with dense P (B, T, H, N, N), autograd through everything."""
    dv, b = _mask_inputs(dv, b, mask)
    if mask is not None:
        p = where_kept(mask, p, torch.eye(p.shape[-1], dtype=p.dtype, device=p.device))
    x = torch.zeros_like(b[:, 0]) if x0 is None else x0
    states = []
    for t in range(p.shape[1]):
        x = (p[:, t].to(x.dtype) @ (dv[:, t] * x).unsqueeze(-1)).squeeze(-1) + b[:, t]
        states.append(x)
    return torch.stack(states, dim=1), x


def _column_one_hot(m: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(m).scatter_(-2, m.argmax(dim=-2, keepdim=True), 1.0)


def pd_dictionary_reference(selection, dictionary, dv, b, initial_state=None, mask=None, temperature=1.0):
    """``pd_dictionary_scan`` as a dense loop: P_t = onehot + softmax - softmax.detach() of M_t down each column."""
    m = torch.einsum("bthk,hkij->bthij", selection.float(), dictionary.float())
    p = _straight_through(_column_one_hot(m), torch.softmax(m / temperature, dim=-2))
    return _dense_scan(p, dv, b, initial_state, mask)


def pd_bank_reference(logits, scores, dv, b, initial_state=None, mask=None, temperature=1.0):
    """``pd_bank_scan`` as a dense loop: e_t = straight-through one-hot of argmax logits (softmax(logits / tau)),
    P_k = straight-through column one-hot of scores_k (column softmax), P_t = sum_k e_t,k P_k."""
    logits, scores = logits.float(), scores.float()
    hard_e = torch.zeros_like(logits).scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    e = _straight_through(hard_e, torch.softmax(logits / temperature, dim=-1))
    bank = _straight_through(_column_one_hot(scores), torch.softmax(scores / temperature, dim=-2))
    return _dense_scan(torch.einsum("bthk,hkij->bthij", e, bank), dv, b, initial_state, mask)


__all__ = [
    "bank_indices",
    "bank_straight_through_grads",
    "bind_pd_op",
    "bound_op_key",
    "dictionary_indices",
    "gather_bank",
    "pd_bank_reference",
    "pd_bank_scan",
    "pd_dictionary_reference",
    "pd_dictionary_scan",
    "pd_scan",
]
