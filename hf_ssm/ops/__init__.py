"""The scan ops of hf_ssm, one home per op family (docs/design.md §2):

- ``pd``: PD transitions x_t = P_t D_t x_{t-1} + b_t (``pd_scan``), and PD-SSM's generated transitions
  (``pd_dictionary_scan``, ``pd_bank_scan``);
- ``block``: dense m x m blocks (``block_scan``) and companion blocks (``companion_scan``);
- ``diag``: diagonal scans (``diag_scan``);
- ``deer``: a non-linear recurrence solved by Newton over the whole sequence (``deer_solve``), on the diag / block
  scans.

Each family folder holds its plain reference (``reference.py``, loops with autograd), its parallel torch
implementation (``parallel.py``, chunked scans with hand-written backwards) and its Triton kernel (``triton.py``,
where one exists), each op under one name in all three; the family's ``__init__`` writes the op's contract (one
signature, one docstring) once and exports the torch implementation. The input checks every implementation calls
are ``checks.py``, a leaf; ``dispatch.py`` picks torch or Triton for the model (the one import of the Triton side,
``kernels.py``, lazy). Nothing here imports hf_ssm.modeling: the model imports the ops, and ``save_pretrained``
flattens the torch side next to the weights (hf_ssm/modeling/portable.py).

This file imports nothing, so importing one family (or the leaf checks) loads nothing else.
"""
