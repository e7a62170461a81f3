"""Plain, slow reference implementations that the fast scans are tested and benchmarked against.

Not part of the portable modeling code (hf_ssm/modeling, copied next to checkpoints for trust_remote_code): nothing
in hf_ssm.modeling imports this package, so a saved checkpoint never carries it.

- ``pd``: the PD-SSM scan as a sequential loop, PD composition and dense forms, and the dictionary / bank ops as
  dense plain-autograd loops.
"""
