"""The block family (docs/design.md §3, §5): h_t = A_t h_{t-1} + b_t, independently for each of N m x m blocks.

The recurrence of BD-LRU (A_t^{(n)} the normalised gate block), of H-LRU (A_t^{(n)} the companion matrix of channel
n) and of the LSTM's DEER step (2 x 2 blocks); with m = 1 it is the diagonal selective LRU. The ops, under one name
in ``reference`` (plain loops), ``parallel`` (the chunked torch scans, with hand-written backwards) and ``triton``
(the kernels, m <= 8), their shapes checked by ``hf_ssm.ops.checks``:

    block_scan(A, b, initial_state=None, mask=None) -> (states (B, T, N, m), final state (B, N, m))

        A (B, T, N, m, m) transitions, row i of a block is output i: h[i] = sum_j A[i, j] h_prev[j] + b[i];
        b (B, T, N, m) inputs; initial_state (B, N, m) or None (zeros); mask (B, T) bool or None, a False step
        (padding) is the identity with zero input. The torch implementations take one real floating dtype; the
        kernels float32 / bfloat16 / float16, accumulated in float32.

    companion_scan(a, v, initial_state=None, mask=None) -> (states (B, T, N, m), final state (B, N, m))

        H-LRU's scan S_t = C(a_t) S_{t-1} + [v_t, 0, ..., 0] with S_t = [h_t, ..., h_{t-m+1}]: a (B, T, N, m) the
        companion first rows (a_{t,1} .. a_{t,m}; the sub-diagonal is ones), v (B, T, N) the slot-0 inputs;
        states[..., 0] is h_t. A masked step keeps the state, which the companion form itself cannot express.

The torch and Triton implementations also take ``chunk_size`` (keyword), which changes only the order of float
additions. The model reaches them through ``hf_ssm.ops.dispatch.ScanOps``, which takes the T = 1 decoding step
(``block_step`` / ``companion_step``) on either backend. This module exports the torch side only.
"""

from .parallel import block_scan, block_step, companion_matrices, companion_scan, companion_step

__all__ = ["block_scan", "block_step", "companion_matrices", "companion_scan", "companion_step"]
