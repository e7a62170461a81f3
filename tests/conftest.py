import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # lets test modules import model_checks

# Triton kernels (tests/test_kernels.py) run in the interpreter on CPU-only machines; triton reads this variable when
# the kernels are defined, so it must be set before anything imports hf_ssm.kernels.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
