import os
import sys

import pytest
import torch

# Lets the test modules in every subfolder import the shared helpers beside this file (model_checks, op_checks).
sys.path.insert(0, os.path.dirname(__file__))

# Triton kernels (tests/ops/, tests/mixers/test_pd_ssm.py) run in the interpreter on CPU-only machines; triton reads
# this variable when the kernels are defined, so it must be set before anything imports hf_ssm.ops.kernels (this file
# is loaded before any test module of the tree).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _torch_threads():
    """A test that sets torch's thread count (an entry point's --cpu_threads) leaves it as it found it: float sums
    depend on the count, and a later test compares numbers computed here with a subprocess's."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
