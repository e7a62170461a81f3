"""The PD family's Triton kernels (docs/design.md §4): ``pd_scan`` (x_t = P_t D_t x_{t-1} + b_t), and
``pd_dictionary_scan`` / ``pd_bank_scan`` with the generation of P fused in, each with its backward. Their contract
(one signature, one docstring) is hf_ssm.ops.pd's; they check their inputs with the checks every PD implementation
calls (hf_ssm.ops.checks) and add the kernels' own dtype rules. Sparse form: idx_t[j] is the row of the 1 in
column j of P_t, dv_t the complex diagonal of D_t. Layout (B, T, H, N) for idx (int32 or int64), dv and b, (B, H, N)
for the initial and final states. dv, b, x0 are complex64, or real tensors with a trailing (real, imag) axis of 2 in
float32 / bfloat16 / float16 (then read in their dtype and accumulated in float32). States are returned as
complex64.

One program holds the state of one (sequence, chunk, head) on chip (N complex lanes, padded to a power of two):

- apply a PD transition: z = dv * x, then the scatter-add (P z)[i] = sum_{j: idx[j] = i} z[j], done as an on-chip
  one-hot product (N <= 128; ``scatter="onehot"``) or through a per-program scratch row with atomic adds
  (``scatter="atomic"``, any N);
- compose two transitions (chunk summaries): idx = idx2[idx1], dv = dv2[idx1] * dv1, two on-chip gathers;
- backward, the adjoint recurrence lambda_t = g_t + A_{t+1}^H lambda_{t+1} with (A^H l)[j] = conj(dv[j]) l[idx[j]],
  only gathers; grad_dv_t[j] = lambda_t[idx_t[j]] conj(x_{t-1}[j]), grad_b = lambda, grad_x0 = A_0^H lambda_0.

``pd_dictionary_scan`` fuses the generation of P into the same autograd node: the forward computes idx =
argmax_i (sum_k s_k M_k)[i, j] in a kernel, the backward computes the straight-through gradient
dL/dM_t[i, j] = p[i, j] (G[i, j] - sum_i' p[i', j] G[i', j]) / tau with p the column softmax of M_t / tau and
G[i, j] = Re(conj(lambda_t[i]) dv_t[j] x_{t-1}[j]), and reduces it straight into dL/ds (B, T, H, K) and
dL/dM (H, K, N, N). Neither the soft matrices M_t nor p nor G (B, T, H, N, N) is ever stored: each program
recomputes one column j of M_t for a block of time steps (a (BT x K) @ (K x N) product) and keeps it on chip.

``pd_bank_scan`` (bank transitions, after Flash PD-SSM): the bank idx_k = column argmax of score matrix k (H, K, N) is
computed once per call; the scan kernels read the selection logits of each step, take k_t = argmax_k, and gather
idx_t = bank[h, k_t] on chip, forward and backward. The straight-through gradients of the logits and the score
matrices are formed from lambda and z in torch (``bank.bank_straight_through_grads``, shared with the torch op).

The model reaches these through ``hf_ssm.ops.dispatch.ScanOps`` (``pd_dictionary_scan``, ``pd_bank_scan``,
``pd_scan``, the same names), which also takes the T = 1 decoding step on either backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_generated_inputs, check_mask, check_pd_shapes, where_kept
from ..triton_common import (
    Layout,
    as_real_pairs,
    carry_chunk,
    cdiv,
    check_float_dtype,
    chunk_program,
    final_chunk,
    grid_dim,
    keep_flags,
    next_pow2,
    on_tensor_device,
    schedule,
    single_chunk_starts,
    step_token,
    upstream_grads,
)
from .bank import bank_straight_through_grads

# Largest state size that uses the on-chip one-hot product for the scatter-add; above it, atomic adds into a scratch
# row.
ONEHOT_MAX_N = 128
SCATTER_MODES = ("auto", "onehot", "atomic")
# Rows (time steps) per program of the P-generation kernels (>= 16 for tl.dot).
GEN_BLOCK_T = 16


# ---------------------------------------------------------------------------------------------------------------
# on-chip helpers


@triton.jit
def _load_pair(ptr, e, mask):
    re = tl.load(ptr + 2 * e, mask=mask, other=0.0).to(tl.float32)
    im = tl.load(ptr + 2 * e + 1, mask=mask, other=0.0).to(tl.float32)
    return re, im


@triton.jit
def _store_pair(ptr, e, re, im, mask):
    tl.store(ptr + 2 * e, re, mask=mask)
    tl.store(ptr + 2 * e + 1, im, mask=mask)


@triton.jit
def _cmul(ar, ai, br, bi):
    return ar * br - ai * bi, ar * bi + ai * br


@triton.jit
def _load_idx(idx_ptr, e, lanes, lm):
    """Column -> row indices as int32; padding lanes map to themselves (an identity that touches nothing real)."""
    idx = tl.load(idx_ptr + e, mask=lm, other=0).to(tl.int32)
    return tl.where(lm, idx, lanes)


@triton.jit
def _scatter(idx, vr, vi, lanes, scratch_ptr, NP: tl.constexpr, ONEHOT: tl.constexpr):
    """out[i] = sum_{j: idx[j] = i} v[j] (several columns may share a row)."""
    if ONEHOT:
        hit = idx[None, :] == lanes[:, None]  # hit[i, j]: column j lands in row i
        outr = tl.sum(tl.where(hit, vr[None, :], 0.0), axis=1)
        outi = tl.sum(tl.where(hit, vi[None, :], 0.0), axis=1)
    else:
        zero = tl.zeros([NP], tl.float32)
        tl.store(scratch_ptr + lanes, zero)
        tl.store(scratch_ptr + NP + lanes, zero)
        tl.debug_barrier()
        tl.atomic_add(scratch_ptr + idx, vr)
        tl.atomic_add(scratch_ptr + NP + idx, vi)
        tl.debug_barrier()
        # .cg: read from L2, where the atomics landed (never a stale L1 line from the previous step)
        outr = tl.load(scratch_ptr + lanes, cache_modifier=".cg")
        outi = tl.load(scratch_ptr + NP + lanes, cache_modifier=".cg")
        tl.debug_barrier()
    return outr, outi


# ---------------------------------------------------------------------------------------------------------------
# scan kernels (schedule: see triton_common)


@triton.jit
def _step_idx(idx_ptr, logit_ptr, keep_ptr, t, h, e, lanes, lm, H, K, N,
              BANK: tl.constexpr, HAS_KEEP: tl.constexpr, KP: tl.constexpr):  # fmt: skip
    """idx_t of head h. Stored indices (idx_ptr at e), or bank mode: k_t = argmax_k logits[t, h, k] (first maximum)
    and idx = bank[h, k_t] (idx_ptr is the (H, K, N) bank), the identity where keep[t] is 0."""
    if BANK:
        kk = tl.arange(0, KP)
        row = tl.load(logit_ptr + (t.to(tl.int64) * H + h) * K + kk, mask=kk < K, other=float("-inf"))
        kt = tl.argmax(row, 0)
        idx = tl.load(idx_ptr + (h * K + kt) * N + lanes, mask=lm, other=0).to(tl.int32)
        idx = tl.where(lm, idx, lanes)
        if HAS_KEEP:
            keep = tl.load(keep_ptr + t + lanes * 0)
            idx = tl.where(keep != 0, idx, lanes)
    else:
        idx = _load_idx(idx_ptr, e, lanes, lm)
    return idx


@triton.jit
def _load_step(idx_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, t, h, lanes, lm, H, K, N,
               BANK: tl.constexpr, HAS_KEEP: tl.constexpr, KP: tl.constexpr):  # fmt: skip
    """Step t of head h: element offsets e, idx_t, dv_t and the input (forward) / state gradient (reverse) g_t."""
    e = (t.to(tl.int64) * H + h) * N + lanes
    idx = _step_idx(idx_ptr, logit_ptr, keep_ptr, t, h, e, lanes, lm, H, K, N, BANK, HAS_KEEP, KP)
    dr, di = _load_pair(dv_ptr, e, lm)
    gr, gi = _load_pair(g_ptr, e, lm)
    return e, idx, dr, di, gr, gi


@triton.jit
def _pd_summary_body(
    idx_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, cu_ptr, cidx_ptr, cdv_ptr, loc_ptr, scratch_ptr, H, N, L,
    max_chunks, K, REVERSE: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr, BANK: tl.constexpr,
    HAS_KEEP: tl.constexpr, KP: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk, head): the chunk's composed transition and local end state from a zero start.

    Forward: composed PD matrix (cidx, cdv) with x_end = P(cidx) D(cdv) x_in + loc.
    Reverse: composed gather map (cidx, cdv) with nu_out[j] = cdv[j] nu_in[cidx[j]] + loc[j].
    """
    pid, seq, c, start, end, t0, steps = chunk_program(cu_ptr, L, max_chunks)
    h = tl.program_id(1)
    lanes = tl.arange(0, NP)
    lm = lanes < N
    scratch = scratch_ptr + (pid.to(tl.int64) * H + h) * 2 * NP
    ck = lanes
    cr = tl.where(lm, 1.0, 0.0)
    ci = tl.zeros([NP], tl.float32)
    lr = tl.zeros([NP], tl.float32)
    li = tl.zeros([NP], tl.float32)
    for s in range(steps):
        t = step_token(t0, steps, s, REVERSE)
        _, idx, dr, di, gr, gi = _load_step(idx_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, t,
                                            h, lanes, lm, H, K, N, BANK, HAS_KEEP, KP)  # fmt: skip
        if REVERSE:  # nu <- conj(dv) (nu + g)[idx]; map <- conj(dv) map[idx]
            ur = tl.gather(lr + gr, idx, 0)
            ui = tl.gather(li + gi, idx, 0)
            lr, li = _cmul(dr, -di, ur, ui)
            cgr = tl.gather(cr, idx, 0)
            cgi = tl.gather(ci, idx, 0)
            cr, ci = _cmul(dr, -di, cgr, cgi)
            ck = tl.gather(ck, idx, 0)
        else:  # x <- P D x + b; composed (idx, dv) <- (idx[ck], dv[ck] * cdv)
            zr, zi = _cmul(dr, di, lr, li)
            sr, si = _scatter(idx, zr, zi, lanes, scratch, NP, ONEHOT)
            lr = sr + gr
            li = si + gi
            gdr = tl.gather(dr, ck, 0)
            gdi = tl.gather(di, ck, 0)
            cr, ci = _cmul(gdr, gdi, cr, ci)
            ck = tl.gather(idx, ck, 0)
    e = (pid.to(tl.int64) * H + h) * N + lanes
    tl.store(cidx_ptr + e, ck, mask=lm)
    _store_pair(cdv_ptr, e, cr, ci, lm)
    _store_pair(loc_ptr, e, lr, li, lm)


@triton.jit
def _pd_summary_kernel(
    idx_ptr, dv_ptr, g_ptr, cu_ptr, cidx_ptr, cdv_ptr, loc_ptr, scratch_ptr, H, N, L, max_chunks,
    REVERSE: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr,
):  # fmt: skip
    """Chunk summaries of stored transitions idx (total, H, N)."""
    _pd_summary_body(idx_ptr, idx_ptr, idx_ptr, dv_ptr, g_ptr, cu_ptr, cidx_ptr, cdv_ptr, loc_ptr, scratch_ptr, H, N,
                     L, max_chunks, 1, REVERSE, ONEHOT, NP, False, False, 1)  # fmt: skip


@triton.jit
def _pd_bank_summary_kernel(
    bank_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, cu_ptr, cidx_ptr, cdv_ptr, loc_ptr, scratch_ptr, H, N, L,
    max_chunks, K, REVERSE: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr, HAS_KEEP: tl.constexpr,
    KP: tl.constexpr,
):  # fmt: skip
    """Chunk summaries of bank transitions: idx_t = bank[h, argmax_k logits[t, h, k]] selected in the kernel."""
    _pd_summary_body(bank_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, cu_ptr, cidx_ptr, cdv_ptr, loc_ptr, scratch_ptr,
                     H, N, L, max_chunks, K, REVERSE, ONEHOT, NP, True, HAS_KEEP, KP)  # fmt: skip


@triton.jit
def _pd_carry_kernel(
    cidx_ptr, cdv_ptr, loc_ptr, init_ptr, starts_ptr, scratch_ptr, H, N, max_chunks,
    REVERSE: tl.constexpr, HAS_INIT: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr,
):  # fmt: skip
    """Per (sequence, head): the true state entering every chunk."""
    seq = tl.program_id(0)
    h = tl.program_id(1)
    lanes = tl.arange(0, NP)
    lm = lanes < N
    scratch = scratch_ptr + (seq.to(tl.int64) * H + h) * 2 * NP
    if HAS_INIT:
        xr, xi = _load_pair(init_ptr, (seq.to(tl.int64) * H + h) * N + lanes, lm)
    else:
        xr = tl.zeros([NP], tl.float32)
        xi = tl.zeros([NP], tl.float32)
    for i in range(max_chunks):
        e = ((seq.to(tl.int64) * max_chunks + carry_chunk(i, max_chunks, REVERSE)) * H + h) * N + lanes
        _store_pair(starts_ptr, e, xr, xi, lm)
        ck = _load_idx(cidx_ptr, e, lanes, lm)
        cr, ci = _load_pair(cdv_ptr, e, lm)
        lr, li = _load_pair(loc_ptr, e, lm)
        if REVERSE:
            xgr = tl.gather(xr, ck, 0)
            xgi = tl.gather(xi, ck, 0)
            xr, xi = _cmul(cr, ci, xgr, xgi)
        else:
            zr, zi = _cmul(cr, ci, xr, xi)
            xr, xi = _scatter(ck, zr, zi, lanes, scratch, NP, ONEHOT)
        xr += lr
        xi += li


@triton.jit
def _pd_apply_body(
    idx_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr, x0_ptr,
    grad_dv_ptr, z_ptr, scratch_ptr, H, N, L, max_chunks, K,
    REVERSE: tl.constexpr, HAS_X0: tl.constexpr, WRITE_Z: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr,
    BANK: tl.constexpr, HAS_KEEP: tl.constexpr, KP: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk, head). Forward: states and the final state. Reverse: lambda, grad_dv, optionally
    z_t = dv_t * x_{t-1} (for the gradient of P), and grad_x0."""
    pid, seq, c, start, end, t0, steps = chunk_program(cu_ptr, L, max_chunks)
    h = tl.program_id(1)
    lanes = tl.arange(0, NP)
    lm = lanes < N
    scratch = scratch_ptr + (pid.to(tl.int64) * H + h) * 2 * NP
    xr, xi = _load_pair(starts_ptr, (pid.to(tl.int64) * H + h) * N + lanes, lm)
    for s in range(steps):
        t = step_token(t0, steps, s, REVERSE)
        e, idx, dr, di, gr, gi = _load_step(idx_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, t, h, lanes, lm, H, K, N, BANK,
                                            HAS_KEEP, KP)  # fmt: skip
        if REVERSE:
            lr = gr + xr
            li = gi + xi
            _store_pair(out_ptr, e, lr, li, lm)
            tt = tl.zeros_like(lanes) + t  # (the interpreter wants masks built from tensors, not scalars)
            pr, pi = _load_pair(states_ptr, e - H * N, lm & (tt > start))
            if HAS_X0:
                qr, qi = _load_pair(x0_ptr, (seq.to(tl.int64) * H + h) * N + lanes, lm & (tt == start))
                pr += qr
                pi += qi
            lgr = tl.gather(lr, idx, 0)  # lambda_t[idx_t[j]]
            lgi = tl.gather(li, idx, 0)
            gdr, gdi = _cmul(lgr, lgi, pr, -pi)
            _store_pair(grad_dv_ptr, e, gdr, gdi, lm)
            if WRITE_Z:
                zr, zi = _cmul(dr, di, pr, pi)
                _store_pair(z_ptr, e, zr, zi, lm)
            xr, xi = _cmul(dr, -di, lgr, lgi)
        else:
            zr, zi = _cmul(dr, di, xr, xi)
            xr, xi = _scatter(idx, zr, zi, lanes, scratch, NP, ONEHOT)
            xr += gr
            xi += gi
            _store_pair(out_ptr, e, xr, xi, lm)
    last = final_chunk(start, end, L, REVERSE)
    _store_pair(final_ptr, (seq.to(tl.int64) * H + h) * N + lanes, xr, xi, lm & (tl.zeros_like(lanes) + c == last))


@triton.jit
def _pd_apply_kernel(
    idx_ptr, dv_ptr, g_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr, x0_ptr, grad_dv_ptr, z_ptr,
    scratch_ptr, H, N, L, max_chunks,
    REVERSE: tl.constexpr, HAS_X0: tl.constexpr, WRITE_Z: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk, head). Forward: states and the final state. Reverse: lambda, grad_dv, optionally
    z_t = dv_t * x_{t-1} (for the gradient of P), and grad_x0. Stored transitions idx (total, H, N)."""
    _pd_apply_body(idx_ptr, idx_ptr, idx_ptr, dv_ptr, g_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr,
                   x0_ptr, grad_dv_ptr, z_ptr, scratch_ptr, H, N, L, max_chunks, 1, REVERSE, HAS_X0, WRITE_Z, ONEHOT,
                   NP, False, False, 1)  # fmt: skip


@triton.jit
def _pd_bank_apply_kernel(
    bank_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr, x0_ptr,
    grad_dv_ptr, z_ptr, scratch_ptr, H, N, L, max_chunks, K,
    REVERSE: tl.constexpr, HAS_X0: tl.constexpr, WRITE_Z: tl.constexpr, ONEHOT: tl.constexpr, NP: tl.constexpr,
    HAS_KEEP: tl.constexpr, KP: tl.constexpr,
):  # fmt: skip
    """_pd_apply_kernel for bank transitions, selected in the kernel (see _step_idx)."""
    _pd_apply_body(bank_ptr, logit_ptr, keep_ptr, dv_ptr, g_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr,
                   x0_ptr, grad_dv_ptr, z_ptr, scratch_ptr, H, N, L, max_chunks, K, REVERSE, HAS_X0, WRITE_Z, ONEHOT,
                   NP, True, HAS_KEEP, KP)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# P generation kernels


@triton.jit
def _soft_column(sel_ptr, m_ptr, rows, rm, h, j, kk, ii, H, K, N):
    """(BT, NP) column j of the soft matrices M_t = sum_k s_{t,k} M_k of head h, and the (KP, NP) dictionary column."""
    sel = tl.load(
        sel_ptr + (rows.to(tl.int64)[:, None] * H + h) * K + kk[None, :],
        mask=rm[:, None] & (kk < K)[None, :],
        other=0.0,
    )
    mcol = tl.load(
        m_ptr + ((h * K + kk[:, None]) * N + ii[None, :]) * N + j, mask=(kk < K)[:, None] & (ii < N)[None, :], other=0.0
    )
    sel = sel.to(tl.float32)
    mcol = mcol.to(tl.float32)
    return tl.dot(sel, mcol, input_precision="ieee"), sel, mcol


@triton.jit
def _pd_select_kernel(
    sel_ptr, m_ptr, keep_ptr, idx_ptr, R, H, K, N,
    HAS_KEEP: tl.constexpr, BT: tl.constexpr, KP: tl.constexpr, NP: tl.constexpr,
):  # fmt: skip
    """idx[t, h, j] = argmax_i M_t[i, j] (first maximum), or j where keep[t] is 0 (identity transition)."""
    rows = tl.program_id(0) * BT + tl.arange(0, BT)
    h = tl.program_id(1)
    j = tl.program_id(2)
    rm = rows < R
    kk = tl.arange(0, KP)
    ii = tl.arange(0, NP)
    soft, _, _ = _soft_column(sel_ptr, m_ptr, rows, rm, h, j, kk, ii, H, K, N)
    soft = tl.where((ii < N)[None, :], soft, float("-inf"))
    best = tl.argmax(soft, axis=1)
    if HAS_KEEP:
        keep = tl.load(keep_ptr + rows, mask=rm, other=1)
        best = tl.where(keep != 0, best, j)
    tl.store(idx_ptr + (rows.to(tl.int64) * H + h) * N + j, best.to(tl.int64), mask=rm)


@triton.jit
def _pd_generation_backward_kernel(
    sel_ptr, m_ptr, keep_ptr, lam_ptr, z_ptr, gsel_ptr, gm_ptr, R, H, K, N, inv_tau, blocks_per_split,
    HAS_KEEP: tl.constexpr, BT: tl.constexpr, KP: tl.constexpr, NP: tl.constexpr,
):  # fmt: skip
    """Straight-through backward of the P generation, one column j of one head over a range of time blocks.

    dsoft_t[:, j] = p (G - <p, G>) / tau, p = softmax(M_t[:, j] / tau), G[i] = Re(conj(lambda_t[i]) z_t[j]);
    gsel[t, h, :] += dsoft_t[:, j] @ M[h, :, :, j]^T (atomic: every column adds to it),
    gm[split, h, :, :, j] = sum_t s_t^T dsoft_t[:, j] (this program's partial sum over its time blocks).
    """
    pid = tl.program_id(0)
    h = pid // N
    j = pid % N
    split = tl.program_id(1)
    kk = tl.arange(0, KP)
    ii = tl.arange(0, NP)
    im = ii < N
    acc = tl.zeros([KP, NP], tl.float32)
    for rb in range(split * blocks_per_split, (split + 1) * blocks_per_split):
        rows = rb * BT + tl.arange(0, BT)
        rm = rows < R
        soft, sel, mcol = _soft_column(sel_ptr, m_ptr, rows, rm, h, j, kk, ii, H, K, N)
        soft = tl.where(im[None, :], soft * inv_tau, float("-inf"))
        p = tl.exp(soft - tl.max(soft, axis=1)[:, None])
        p = p / tl.sum(p, axis=1)[:, None]
        base = rows.to(tl.int64) * H + h
        lam_off = base[:, None] * N + ii[None, :]
        lmask = rm[:, None] & im[None, :]
        lr, li = _load_pair(lam_ptr, lam_off, lmask)
        zr, zi = _load_pair(z_ptr, base * N + j, rm)
        G = lr * zr[:, None] + li * zi[:, None]
        dsoft = p * (G - tl.sum(p * G, axis=1)[:, None]) * inv_tau
        valid = lmask
        if HAS_KEEP:
            keep = tl.load(keep_ptr + rows, mask=rm, other=0)
            valid = valid & (keep != 0)[:, None]
        dsoft = tl.where(valid, dsoft, 0.0)
        gsel = tl.dot(dsoft, tl.trans(mcol), input_precision="ieee")  # (BT, KP)
        tl.atomic_add(gsel_ptr + base[:, None] * K + kk[None, :], gsel, mask=rm[:, None] & (kk < K)[None, :])
        acc += tl.dot(tl.trans(sel), dsoft, input_precision="ieee")  # (KP, NP)
    gm_off = (((split.to(tl.int64) * H + h) * K + kk[:, None]) * N + ii[None, :]) * N + j
    tl.store(gm_ptr + gm_off, acc, mask=(kk < K)[:, None] & im[None, :])


# ---------------------------------------------------------------------------------------------------------------
# launchers


def _scatter_mode(n: int, scatter: str) -> bool:
    """True for the one-hot product, False for atomic adds."""
    if scatter not in SCATTER_MODES:
        raise ValueError(f"scatter must be one of {list(SCATTER_MODES)}, got {scatter!r}")
    if scatter == "auto":
        return n <= ONEHOT_MAX_N
    return scatter == "onehot"


@on_tensor_device
def _run(idx, dv, g, layout: Layout, chunk, init, onehot, reverse, states=None, x0=None, write_z=False, bank=None):
    """One chunked pass over packed data: idx (total, H, N), dv / g (total, H, N, 2). No autograd.

    bank = (logits (total, H, K) float32, keep (total,) int32 or None): idx is then the (H, K, N) int32 bank and
    the kernels select idx_t = bank[h, argmax_k logits[t, h, k]] themselves (the identity where keep is 0).
    Returns float32 (out, final, grad_dv, z): forward: states (total, H, N, 2), final (S, H, N, 2); reverse: lambda,
    grad_x0, grad_dv and (write_z) z = dv * x_prev.
    """
    total, H, N = dv.shape[:3]
    if bank is not None:
        logits, keep = bank
        K = logits.shape[-1]
        bank_args = (idx, logits, keep if keep is not None else logits)
        bank_tail = (K,)
        bank_flags = dict(HAS_KEEP=keep is not None, KP=next_pow2(K))
    S, C = layout.batch, layout.chunks(chunk)
    NP = next_pow2(N)
    warps = 8 if NP >= 128 else 4  # the (NP, NP) one-hot tile of N = 128 needs ~220 registers a thread at 4 warps
    dev, f32 = dv.device, torch.float32
    grid_dim(H)
    scratch = torch.empty(1, dtype=f32, device=dev)
    if C > 1:
        cidx = torch.empty(S * C, H, N, dtype=torch.int32, device=dev)
        cdv = torch.empty(S * C, H, N, 2, dtype=f32, device=dev)
        loc = torch.empty_like(cdv)
        if not onehot:
            scratch = torch.empty(S * C * H * 2 * NP, dtype=f32, device=dev)
        if bank is None:
            _pd_summary_kernel[(S * C, H)](
                idx, dv, g, layout.cu, cidx, cdv, loc, scratch, H, N, chunk, C,
                REVERSE=reverse, ONEHOT=onehot, NP=NP, num_warps=warps,
            )  # fmt: skip
        else:
            _pd_bank_summary_kernel[(S * C, H)](
                *bank_args, dv, g, layout.cu, cidx, cdv, loc, scratch, H, N, chunk, C, *bank_tail,
                REVERSE=reverse, ONEHOT=onehot, NP=NP, **bank_flags, num_warps=warps,
            )  # fmt: skip
        starts = torch.empty_like(cdv)
        _pd_carry_kernel[(S, H)](
            cidx, cdv, loc, init if init is not None else loc, starts, scratch, H, N, C,
            REVERSE=reverse, HAS_INIT=init is not None, ONEHOT=onehot, NP=NP, num_warps=warps,
        )  # fmt: skip
    else:
        starts = single_chunk_starts(init, (S, H, N, 2), dev)
    if not onehot and scratch.numel() < S * C * H * 2 * NP:
        scratch = torch.empty(S * C * H * 2 * NP, dtype=f32, device=dev)
    out = torch.empty(total, H, N, 2, dtype=f32, device=dev)
    final = torch.empty(S, H, N, 2, dtype=f32, device=dev)
    grad_dv = torch.empty_like(out) if reverse else out
    z = torch.empty_like(out) if write_z else out
    tail = (states if states is not None else out, x0 if x0 is not None else out, grad_dv, z, scratch, H, N, chunk, C)
    flags = dict(REVERSE=reverse, HAS_X0=x0 is not None, WRITE_Z=write_z, ONEHOT=onehot, NP=NP, num_warps=warps)
    if bank is None:
        _pd_apply_kernel[(S * C, H)](idx, dv, g, layout.cu, starts, out, final, *tail, **flags)
    else:
        _pd_bank_apply_kernel[(S * C, H)](
            *bank_args, dv, g, layout.cu, starts, out, final, *tail, *bank_tail, **flags, **bank_flags
        )
    return out, final, (grad_dv if reverse else None), (z if write_z else None)


@on_tensor_device
def _select(sel: torch.Tensor, dictionary: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """idx (R, H, N) int64 from sel (R, H, K) and dictionary (H, K, N, N)."""
    R, H, K = sel.shape
    N = dictionary.shape[-1]
    idx = torch.empty(R, H, N, dtype=torch.int64, device=sel.device)
    KP, NP = max(16, next_pow2(K)), max(16, next_pow2(N))
    _pd_select_kernel[(cdiv(R, GEN_BLOCK_T), grid_dim(H), grid_dim(N))](
        sel, dictionary, keep if keep is not None else sel, idx, R, H, K, N,
        HAS_KEEP=keep is not None, BT=GEN_BLOCK_T, KP=KP, NP=NP,
    )  # fmt: skip
    return idx


@on_tensor_device
def _generation_backward(sel, dictionary, keep, lam, z, temperature):
    """(grad_sel (R, H, K), grad_dictionary (H, K, N, N)), float32."""
    R, H, K = sel.shape
    N = dictionary.shape[-1]
    KP, NP = max(16, next_pow2(K)), max(16, next_pow2(N))
    blocks = cdiv(R, GEN_BLOCK_T)
    # enough programs to fill a GPU (H * N columns x splits), few partial sums of dL/dM to add up afterwards
    splits = max(1, min(blocks, 1024 // max(1, H * N)))
    per_split = cdiv(blocks, splits)
    splits = cdiv(blocks, per_split)
    gsel = torch.zeros(R, H, K, dtype=torch.float32, device=sel.device)
    gm = torch.empty(splits, H, K, N, N, dtype=torch.float32, device=sel.device)
    _pd_generation_backward_kernel[(H * N, splits)](
        sel, dictionary, keep if keep is not None else sel, lam, z, gsel, gm, R, H, K, N, 1.0 / temperature, per_split,
        HAS_KEEP=keep is not None, BT=GEN_BLOCK_T, KP=KP, NP=NP, num_warps=8 if KP * NP >= 4096 else 4,
    )  # fmt: skip
    return gsel, gm.sum(0)


# ---------------------------------------------------------------------------------------------------------------
# the launchers as custom ops: torch.compile keeps each pass one opaque call instead of tracing into Triton's
# launcher (docs/design.md §7.3); a result not asked for is an empty tensor (an op returns tensors only)


@torch.library.custom_op("hf_ssm::pd_pass", mutates_args=())
def _pd_pass(
    idx: torch.Tensor,
    dv: torch.Tensor,
    g: torch.Tensor,
    cu: torch.Tensor,
    batch: int,
    steps: int,
    chunk: int,
    init: torch.Tensor | None,
    onehot: bool,
    reverse: bool,
    states: torch.Tensor | None,
    x0: torch.Tensor | None,
    write_z: bool,
    bank_logits: torch.Tensor | None,
    bank_keep: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_run` as the op hf_ssm::pd_pass; bank = (bank_logits, bank_keep) when bank_logits is given."""
    bank = None if bank_logits is None else (bank_logits, bank_keep)
    out, final, grad_dv, z = _run(
        idx, dv, g, Layout(cu, batch, steps), chunk, init, onehot, reverse, states, x0, write_z, bank
    )
    return out, final, out.new_empty(0) if grad_dv is None else grad_dv, out.new_empty(0) if z is None else z


@_pd_pass.register_fake
def _(idx, dv, g, cu, batch, steps, chunk, init, onehot, reverse, states, x0, write_z, bank_logits, bank_keep):
    out = dv.new_empty(dv.shape, dtype=torch.float32)
    final = out.new_empty(batch, *dv.shape[1:])
    lam = torch.empty_like(out) if reverse else out.new_empty(0)
    return out, final, lam, torch.empty_like(out) if write_z else out.new_empty(0)


def _pass(idx, dv, g, layout: Layout, chunk, init, onehot, reverse, states=None, x0=None, write_z=False, bank=None):
    """`_run`'s results through the op hf_ssm::pd_pass: (out, final, grad_dv or None, z or None)."""
    logits, keep = (None, None) if bank is None else bank
    out, final, grad_dv, z = _pd_pass(
        idx, dv, g, layout.cu, layout.batch, layout.steps, chunk, init, onehot, reverse, states, x0, write_z, logits,
        keep,
    )  # fmt: skip
    return out, final, (grad_dv if reverse else None), (z if write_z else None)


@torch.library.custom_op("hf_ssm::pd_select", mutates_args=())
def _pd_select(sel: torch.Tensor, dictionary: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """`_select` as the op hf_ssm::pd_select."""
    return _select(sel, dictionary, keep)


@_pd_select.register_fake
def _(sel, dictionary, keep):
    return sel.new_empty(*sel.shape[:2], dictionary.shape[-1], dtype=torch.int64)


@torch.library.custom_op("hf_ssm::pd_generation_backward", mutates_args=())
def _pd_generation_backward(
    sel: torch.Tensor,
    dictionary: torch.Tensor,
    keep: torch.Tensor | None,
    lam: torch.Tensor,
    z: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_generation_backward` as the op hf_ssm::pd_generation_backward."""
    return _generation_backward(sel, dictionary, keep, lam, z, temperature)


@_pd_generation_backward.register_fake
def _(sel, dictionary, keep, lam, z, temperature):
    return sel.new_empty(sel.shape, dtype=torch.float32), dictionary.new_empty(dictionary.shape, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------------------
# autograd


def _flat(t: torch.Tensor, total: int) -> torch.Tensor:
    return t.reshape(total, *t.shape[2:]).contiguous()


def _backward_core(ctx, grad_states, grad_final, write_z, bank=None):
    """The reverse pass every PD node shares, from what ``_forward_core`` saved: (lambda, grad_x0, grad_dv, z)."""
    idx, dv, x0, states = ctx.saved_tensors[:4]
    g, gf = upstream_grads(grad_states, grad_final, states)
    return _pass(
        idx, dv, g, ctx.layout, ctx.chunk, gf, ctx.onehot, True, states=states, x0=x0, write_z=write_z, bank=bank
    )


def _forward_core(ctx, idx, dv, b, x0, layout, chunk, onehot, saved=(), bank=None):
    """The forward pass every PD node shares: flatten dv, b (B, T, H, N, 2), run the scan over the transitions idx
    (or the bank), save (idx, dv, x0, states, *saved) and what ``_backward_core`` / ``_input_grads`` read.
    Returns (states (B, T, H, N, 2), final (B, H, N, 2)), float32."""
    dv_f, b_f = _flat(dv, layout.total), _flat(b, layout.total)
    x0_f = None if x0 is None else x0.contiguous()
    states, final, _, _ = _pass(idx, dv_f, b_f, layout, chunk, x0_f, onehot, False, bank=bank)
    ctx.save_for_backward(idx, dv_f, x0_f, states, *saved)
    ctx.layout, ctx.chunk, ctx.onehot = layout, chunk, onehot
    ctx.input_meta = (dv.shape, dv.dtype, b.dtype, None if x0 is None else x0.dtype)
    return states.view(*dv.shape[:2], *states.shape[1:]), final


def _input_grads(ctx, lam, grad_x0, grad_dv):
    """(grad_dv, grad_b, grad_x0) in the shapes and dtypes of the node's inputs (grad_b = lambda)."""
    shape, dv_dtype, b_dtype, x0_dtype = ctx.input_meta
    return (
        grad_dv.view(shape).to(dv_dtype),
        lam.view(shape).to(b_dtype),
        None if x0_dtype is None else grad_x0.to(x0_dtype),
    )


class _PDScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, idx, dv, b, x0, p_soft, layout, chunk, onehot):
        ctx.p_meta = None if p_soft is None else (p_soft.shape, p_soft.dtype)
        return _forward_core(ctx, _flat(idx, layout.total), dv, b, x0, layout, chunk, onehot)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        lam, grad_x0, grad_dv, z = _backward_core(ctx, grad_states, grad_final, ctx.p_meta is not None)
        grad_p = None
        if ctx.p_meta is not None:  # straight-through: dL/dP_t[i, j] = Re(conj(lambda_t[i]) z_t[j]); (T, N, N) by API
            lam_c, z_c = torch.view_as_complex(lam), torch.view_as_complex(z)
            p_shape, p_dtype = ctx.p_meta
            grad_p = (lam_c.conj().unsqueeze(-1) * z_c.unsqueeze(-2)).real.reshape(p_shape).to(p_dtype)
        return None, *_input_grads(ctx, lam, grad_x0, grad_dv), grad_p, None, None, None


class _PDGeneratedScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, sel, dictionary, dv, b, x0, mask, temperature, layout, chunk, onehot):
        sel_f, dict_f, keep_f = _flat(sel, layout.total), dictionary.contiguous(), keep_flags(mask)
        ctx.temperature, ctx.meta = temperature, (sel.shape, sel.dtype, dictionary.dtype)
        idx = _pd_select(sel_f, dict_f, keep_f)
        return _forward_core(ctx, idx, dv, b, x0, layout, chunk, onehot, saved=(sel_f, dict_f, keep_f))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        sel_f, dict_f, keep_f = ctx.saved_tensors[4:]
        sel_shape, sel_dtype, dict_dtype = ctx.meta
        need_gen = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        lam, grad_x0, grad_dv, z = _backward_core(ctx, grad_states, grad_final, need_gen)
        grad_sel = grad_dict = None
        if need_gen:
            gsel, gdict = _pd_generation_backward(sel_f, dict_f, keep_f, lam, z, ctx.temperature)
            grad_sel, grad_dict = gsel.view(sel_shape).to(sel_dtype), gdict.to(dict_dtype)
        return grad_sel, grad_dict, *_input_grads(ctx, lam, grad_x0, grad_dv), None, None, None, None, None


class _PDBankScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, scores, dv, b, x0, mask, temperature, layout, chunk, onehot):
        logits_f, keep_f = _flat(logits, layout.total).float(), keep_flags(mask)
        bank = scores.float().argmax(dim=-2).to(torch.int32).contiguous()  # (H, K, N), once per call
        ctx.temperature, ctx.meta = temperature, (logits.shape, logits.dtype)
        saved = (logits_f, scores, keep_f)
        return _forward_core(ctx, bank, dv, b, x0, layout, chunk, onehot, saved=saved, bank=(logits_f, keep_f))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        logits_f, scores, keep_f = ctx.saved_tensors[4:]
        logits_shape, logits_dtype = ctx.meta
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        lam, grad_x0, grad_dv, z = _backward_core(ctx, grad_states, grad_final, any(need), bank=(logits_f, keep_f))
        grad_logits = grad_scores = None
        if any(need):  # the straight-through gradients, from lambda and z, in torch (shared with the torch op)
            batch, steps = ctx.input_meta[0][:2]
            lam_c = torch.view_as_complex(lam).view(batch, steps, *lam.shape[1:3])
            z_c = torch.view_as_complex(z).view(batch, steps, *z.shape[1:3])
            mask = None if keep_f is None else keep_f.view(batch, steps).bool()
            logits = logits_f.view(logits_shape)
            grad_logits, grad_scores = bank_straight_through_grads(
                logits, scores.float(), logits.argmax(dim=-1), lam_c, z_c, mask, ctx.temperature, *need
            )
            grad_logits = None if grad_logits is None else grad_logits.to(logits_dtype)
            grad_scores = None if grad_scores is None else grad_scores.to(scores.dtype)
        return grad_logits, grad_scores, *_input_grads(ctx, lam, grad_x0, grad_dv), None, None, None, None, None


# ---------------------------------------------------------------------------------------------------------------
# public functions


def _prepare(dv, b, x0, chunk_size, scatter):
    """dv, b, x0 as (..., 2) real pairs in a dtype the kernels take, the flat layout, the chunk and the scatter mode
    (shapes checked by the caller)."""
    dv_r, b_r = as_real_pairs("dv", dv), as_real_pairs("b", b)
    x0_r = None if x0 is None else as_real_pairs("x0", x0)
    layout, chunk = schedule(dv_r, "dv", chunk_size)
    return dv_r, b_r, x0_r, layout, chunk, _scatter_mode(dv_r.shape[3], scatter)


def pd_scan(
    idx: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    p_soft: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
    scatter: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.pd.pd_scan`` on the Triton kernels. Returns complex64 states and final state.

    The kernels' own rules: idx int32 or int64; dv, b, initial_state complex64 or (..., 2) real pairs in float32 /
    bfloat16 / float16. For the version that never stores p_soft use ``pd_dictionary_scan``. chunk_size: time
    chunk of the schedule, ``triton_common.kernel_chunk_size(T)`` if None; scatter: ``"auto"`` (one-hot product for
    N <= 128, atomics above), ``"onehot"`` or ``"atomic"``.
    """
    check_pd_shapes(idx, dv, b, initial_state, p_soft)
    if idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"idx must be int32 or int64, got {idx.dtype}")
    dv_r, b_r, x0_r, layout, chunk, onehot = _prepare(dv, b, initial_state, chunk_size, scatter)
    states, final = _PDScanFunction.apply(idx, dv_r, b_r, x0_r, p_soft, layout, chunk, onehot)
    return torch.view_as_complex(states), torch.view_as_complex(final)


def pd_select(sel: torch.Tensor, dictionary: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """idx (B, T, H, N) int64: argmax_i (sum_k sel[..., k] dictionary[h, k])[i, j], without storing the soft matrices.

    sel: (B, T, H, K) selection weights; dictionary: (H, K, N, N); mask: optional (B, T) bool, False = identity.
    """
    if sel.dim() != 4 or dictionary.dim() != 4 or tuple(dictionary.shape[:2]) != tuple(sel.shape[2:]):
        raise ValueError(
            f"sel must have shape (B, T, H, K) and dictionary (H, K, N, N); got {tuple(sel.shape)} and "
            f"{tuple(dictionary.shape)}"
        )
    batch, steps, heads, k = sel.shape
    check_mask(mask, batch, steps, op="pd_select")
    _check_selection_dtypes(sel, dictionary)
    with torch.no_grad():
        idx = _pd_select(sel.reshape(batch * steps, heads, k).contiguous(), dictionary.contiguous(), keep_flags(mask))
    return idx.view(batch, steps, heads, -1)


def _mask_pairs(dv_r: torch.Tensor, b_r: torch.Tensor, mask: torch.Tensor | None):
    """Padded steps (mask False): dv = 1 + 0i and b = 0, on (B, T, H, N, 2) pairs; the kernels set P = identity."""
    if mask is None:
        return dv_r, b_r
    one = torch.tensor([1.0, 0.0], dtype=dv_r.dtype, device=dv_r.device)
    return where_kept(mask, dv_r, one), where_kept(mask, b_r, torch.zeros((), dtype=b_r.dtype, device=b_r.device))


def _check_selection_dtypes(selection, matrices):
    check_float_dtype("the selection", selection)
    check_float_dtype("the matrices", matrices)


def pd_dictionary_scan(
    selection: torch.Tensor,
    dictionary: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    *,
    chunk_size: int | None = None,
    scatter: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.pd.pd_dictionary_scan`` on the Triton kernels: P generation + PD scan in one autograd node,
    never storing a (B, T, H, N, N) tensor (each program recomputes its columns of M_t on chip, forward and
    backward). chunk_size and scatter as ``pd_scan``'s.
    """
    return _scan_with_generated_p(
        _PDGeneratedScanFunction, "pd_dictionary_scan", selection, dictionary, dv, b, initial_state,
        temperature, mask, chunk_size, scatter,
    )  # fmt: skip


def pd_bank_scan(
    logits: torch.Tensor,
    scores: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    *,
    chunk_size: int | None = None,
    scatter: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.pd.pd_bank_scan`` on the Triton kernels: the bank (H, K, N) is computed once per call; the
    selection of k_t and the gather of its indices run inside the scan kernels, so no (B, T, H, N) index tensor is
    ever written. chunk_size and scatter as ``pd_scan``'s.
    """
    return _scan_with_generated_p(
        _PDBankScanFunction, "pd_bank_scan", logits, scores, dv, b, initial_state,
        temperature, mask, chunk_size, scatter,
    )  # fmt: skip


def _scan_with_generated_p(function, name, selection, matrices, dv, b, x0, temperature, mask, chunk_size, scatter):
    """The checks and the call shared by the dictionary and bank modes (`name` in errors): the shapes every
    generated op checks, the kernels' dtypes; masked steps get dv = 1, b = 0."""
    check_generated_inputs(name, selection, matrices, dv, b, x0, mask, temperature)
    _check_selection_dtypes(selection, matrices)
    dv_r, b_r, x0_r, layout, chunk, onehot = _prepare(dv, b, x0, chunk_size, scatter)
    dv_r, b_r = _mask_pairs(dv_r, b_r, mask)
    states, final = function.apply(
        selection, matrices, dv_r, b_r, x0_r, mask, float(temperature), layout, chunk, onehot
    )
    return torch.view_as_complex(states), torch.view_as_complex(final)


__all__ = ["ONEHOT_MAX_N", "pd_bank_scan", "pd_dictionary_scan", "pd_scan", "pd_select"]
