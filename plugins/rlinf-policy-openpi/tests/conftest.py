import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny():
    """``tiny(pi05=False, layout="openpi", **kw)`` → path of a tiny checkpoint (made once per argument set)."""
    from rlinf_policy_openpi.testing import tiny_checkpoint

    return tiny_checkpoint
