"""The diagonal family (docs/design.md §3): x_t = a_t * x_{t-1} + b_t, elementwise.

Every channel is an independent scalar recurrence, so ``a`` is a tensor of the states' shape: the inner step of DEER
(each Newton iteration is one of these, with a_t a Jacobian diagonal that may be 0, negative or > 1) and of any
diagonal SSM. The op, under one name in ``reference`` (a plain loop), ``parallel`` (the chunked torch scan, with a
hand-written backward) and ``triton`` (the kernel), its inputs checked by ``hf_ssm.ops.checks``:

    diag_scan(a, b, initial_state=None, mask=None) -> (states (B, T, *S), final state (B, *S))

        a, b (B, T, *S) of one dtype (S any channel shape: (D,), (H, N), ...), initial_state (B, *S) or None
        (zeros), mask (B, T) bool or None: a False step (padding) is the identity with zero input. Real and complex
        dtypes; half / bfloat16 inputs are accumulated in float32 and the states returned in the inputs' dtype (the
        kernel takes float32 / bfloat16 / float16 / complex64).

The torch and Triton implementations also take ``chunk_size`` (keyword), which changes only the order of float
additions. The model reaches them through ``hf_ssm.ops.dispatch.ScanOps``, which takes the T = 1 decoding step
(``diag_step``) on either backend. This module exports the torch side only.
"""

from .parallel import diag_scan, diag_scan_adjoint, diag_step

__all__ = ["diag_scan", "diag_scan_adjoint", "diag_step"]
