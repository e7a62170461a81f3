"""PD-SSM's generated transitions in parallel torch (docs/design.md §4): the torch implementations of
``pd_dictionary_scan`` and ``pd_bank_scan`` (their contract is written once, in hf_ssm.ops.pd), each one autograd
node for the generation of P_t, the scan and the straight-through backward.

- dictionary (``DICTIONARY_OP``): P_t = column argmax of M_t = sum_k s_t,k M_k (the paper);
- bank (``BANK_OP``): P_k = column argmax of score_k once per call, P_t = P_{argmax_k logits_t,k} (bank.py).

Models and callers reach them, or the kernels, through ``hf_ssm.ops.dispatch.ScanOps.pd_generated``
(``pd_dictionary_scan`` / ``pd_bank_scan``), which takes the T = 1 decoding step (``GeneratedOp.step``) on either
backend. Both ops check their inputs with ``checks.check_generated_inputs``, as the kernels and the references do.

The dictionary op never holds more than one chunk of tokens' N x N matrices: the forward keeps only idx, and the
backward recomputes M_t and its column softmax chunk by chunk, so its memory is Theta(T H (N + K)). The bank op
computes the K column argmaxes once per call and gathers idx_t from them.
"""

from __future__ import annotations

import contextlib
import math

import torch

from ..checks import check_generated_inputs, default_chunk_size, where_kept
from .bank import bank_indices, bank_straight_through_grads, gather_bank
from .parallel import _scatter_scan_chunked, as_complex, needs_grad, pd_scan_backward, pd_step

# Elements of one chunk of (H, rows, N, N) matrices in the dictionary op (1 MiB of float32, cache-sized).
GEN_CHUNK_ELEMENTS = 1 << 18
_NO_CONTEXT = contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------------------------
# shared pieces


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


def _scan_no_grad(idx, dv, b, x0):
    """Forward only."""
    states = _scatter_scan_chunked(idx, dv, b, x0, default_chunk_size(idx.shape[1]))
    return states, states[:, -1]


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


def pd_dictionary_scan(selection, dictionary, dv, b, initial_state=None, mask=None, temperature=1.0):
    """``hf_ssm.ops.pd.pd_dictionary_scan`` in torch, any T (the decoding step is ``GeneratedOp.step``)."""
    check_generated_inputs("pd_dictionary_scan", selection, dictionary, dv, b, initial_state, mask, temperature)
    with torch.autocast(device_type=dv.device.type, enabled=False):
        sel, dictionary = selection.float(), dictionary.float()
        dv, b = _mask_inputs(as_complex(dv), as_complex(b), mask)
        x0 = torch.zeros_like(b[:, 0]) if initial_state is None else as_complex(initial_state)
        if not needs_grad(sel, dictionary, dv, b, x0):
            return _scan_no_grad(dictionary_indices(sel, dictionary, mask), dv, b, x0)
        return _DictionaryScan.apply(sel, dictionary, dv, b, x0, mask, float(temperature))


# ---------------------------------------------------------------------------------------------------------------
# bank mode, torch


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


def _bank_step_indices(logits, scores):
    """idx (B, H, N) of one step: bank entry argmax_k logits[:, 0, h, k] of the column argmaxes of the scores."""
    return gather_bank(bank_indices(scores), logits[:, 0].argmax(dim=-1))


def pd_bank_scan(logits, scores, dv, b, initial_state=None, mask=None, temperature=1.0):
    """``hf_ssm.ops.pd.pd_bank_scan`` in torch, any T (the decoding step is ``GeneratedOp.step``)."""
    check_generated_inputs("pd_bank_scan", logits, scores, dv, b, initial_state, mask, temperature)
    with torch.autocast(device_type=dv.device.type, enabled=False):
        logits, scores = logits.float(), scores.float()
        dv, b = _mask_inputs(as_complex(dv), as_complex(b), mask)
        x0 = torch.zeros_like(b[:, 0]) if initial_state is None else as_complex(initial_state)
        if not needs_grad(logits, scores, dv, b, x0):
            idx = _identity_where_masked(gather_bank(bank_indices(scores), logits.argmax(dim=-1)), mask)
            return _scan_no_grad(idx, dv, b, x0)
        return _BankScan.apply(logits, scores, dv, b, x0, mask, float(temperature))


# ---------------------------------------------------------------------------------------------------------------
# the ops and their decoding step


class GeneratedOp:
    """One generated PD op: `name` (its ScanOps method, in errors), `torch_op` (any T), `step_indices` (the
    transition of one decoding step: (selection (B, 1, H, K), matrices (H, K, N, N)) float32 -> idx (B, H, N)) and
    `kernel` (the attribute of hf_ssm.ops.kernels that runs it on Triton; the three implementations share the op's
    name). ScanOps.pd_generated takes one; a transition mode (hf_ssm/modeling/pd_transitions.py) holds the one it
    calls."""

    def __init__(self, name: str, torch_op, step_indices, kernel: str):
        self.name, self.torch_op, self.step_indices, self.kernel = name, torch_op, step_indices, kernel

    def __repr__(self) -> str:
        return f"GeneratedOp({self.name})"

    def step(self, selection, matrices, dv, b, x0=None, mask=None):
        """The T = 1 decoding step (``parallel.is_decode_step``) of this op, on either backend: P chosen from
        selection (B, 1, H, K) and matrices (H, K, N, N) in float32 (like the chunked ops, also inside an autocast
        region), then the one update ``parallel.pd_step``. Returns ((B, 1, H, N), (B, H, N)) complex64."""
        device = dv.device.type
        off = torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) else _NO_CONTEXT
        with off:
            idx = self.step_indices(_as_float(selection), _as_float(matrices))
            return pd_step(idx, dv, b, x0, mask)


DICTIONARY_OP = GeneratedOp("pd_dictionary_scan", pd_dictionary_scan, _dictionary_step_indices, "pd_dictionary_scan")
BANK_OP = GeneratedOp("pd_bank_scan", pd_bank_scan, _bank_step_indices, "pd_bank_scan")


__all__ = ["BANK_OP", "DICTIONARY_OP", "GeneratedOp", "dictionary_indices", "pd_bank_scan", "pd_dictionary_scan"]
