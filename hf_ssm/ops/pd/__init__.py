"""The PD family (docs/design.md §4): PD transitions x_t = P_t D_t x_{t-1} + b_t, P_t a column one-hot matrix and
D_t a complex diagonal.

A PD transition is stored sparsely: ``idx[j]`` is the row of the single 1 in column j of P_t, ``dv[j]`` the complex
diagonal entry of D_t. Layout: idx, dv, b and the states (B, T, H, N); initial and final states (B, H, N).

The ops, under one name in ``reference`` (plain loops), ``parallel`` / ``generated`` (the parallel torch scans, with
hand-written backwards) and ``triton`` (the kernels), their shapes checked by ``hf_ssm.ops.checks``:

    pd_scan(idx, dv, b, initial_state=None, p_soft=None) -> (states (B, T, H, N), final (B, H, N))

        The scan of given transitions: idx (B, T, H, N) int64 (the kernels also take int32), dv and b (B, T, H, N)
        complex (the kernels also take real (..., 2) pairs), initial_state (B, H, N) or None (zeros). p_soft
        (B, T, H, N, N), optional, is never read: it receives the straight-through gradient of P_t,
        dL/dP_t[i, j] = Re(conj(lambda_t[i]) dv_t[j] x_{t-1}[j]), lambda_t = dL/dx_t. No mask: the caller pads with
        identity transitions (idx = j, dv = 1, b = 0).

    pd_dictionary_scan(selection, dictionary, dv, b, initial_state=None, mask=None, temperature=1.0)
    pd_bank_scan(logits, scores, dv, b, initial_state=None, mask=None, temperature=1.0)
        -> (states (B, T, H, N) complex64, final (B, H, N) complex64)

        PD-SSM's generated transitions, P_t made inside the op. Dictionary: selection s_t (B, T, H, K), dictionary M
        (H, K, N, N); P_t = column argmax of M_t = sum_k s_t,k M_k (the paper). Bank: logits (B, T, H, K), score
        matrices (H, K, N, N); P_k = column argmax of score_k, P_t = P_{argmax_k logits_t,k} (bank.py). Both are
        straight-through: the hard choices in the forward, the gradients of softmax(. / temperature) (down each
        column of an N x N matrix, across the K logits) in the backward. dv, b, initial_state complex or real
        (..., 2) pairs; mask (B, T) bool: a False step is the identity transition with zero input and passes no
        gradient to its P.

The torch and Triton implementations also take ``chunk_size`` (keyword; the Triton ones ``scatter`` too), which
changes only the order of float additions. The model reaches them through ``hf_ssm.ops.dispatch.ScanOps``, which
also takes the T = 1 decoding step (``is_decode_step`` / ``pd_step``) on either backend. Also here: ``automaton``
(the O(N) straight-through backward of a pure automaton's direct transition, torch only) and ``bank`` (the bank's
gather and straight-through gradients, shared by the torch op and the kernel).

This module exports the torch side only: the references and the kernels are imported by name
(``hf_ssm.ops.pd.reference``, ``hf_ssm.ops.pd.triton``), so the portable checkpoint code carries neither.
"""

from .automaton import automaton_direct_scan
from .bank import bank_indices, bank_straight_through_grads, gather_bank
from .generated import BANK_OP, DICTIONARY_OP, GeneratedOp, dictionary_indices, pd_bank_scan, pd_dictionary_scan
from .parallel import as_complex, as_pairs, is_decode_step, needs_grad, pd_scan, pd_scan_backward, pd_step

__all__ = [
    "BANK_OP",
    "DICTIONARY_OP",
    "GeneratedOp",
    "as_complex",
    "as_pairs",
    "automaton_direct_scan",
    "bank_indices",
    "bank_straight_through_grads",
    "dictionary_indices",
    "gather_bank",
    "is_decode_step",
    "needs_grad",
    "pd_bank_scan",
    "pd_dictionary_scan",
    "pd_scan",
    "pd_scan_backward",
    "pd_step",
]
