import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_wan(tmp_path_factory):
    """A tiny random Wan world model in the released layout (64 px, resnet_rm.pth, 4 + 4 init files)."""
    from rlinf_wm_wan.make_tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("wan") / "RLinf-Wan-LIBERO-Tiny")
