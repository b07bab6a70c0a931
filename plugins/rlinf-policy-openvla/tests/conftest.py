import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_oft():
    from rlinf_policy_openvla.testing import tiny_checkpoint

    return tiny_checkpoint(kind="oft")


@pytest.fixture(scope="session")
def tiny_openvla():
    from rlinf_policy_openvla.testing import tiny_checkpoint

    return tiny_checkpoint(kind="openvla")


@pytest.fixture
def obs():
    from rlinf_core import Observation

    gen = torch.Generator().manual_seed(3)
    imgs = torch.randint(0, 256, (3, 40, 40, 3), generator=gen, dtype=torch.uint8)
    tasks = ["put the black bowl on the plate", "turn on the stove", "open the top drawer and put the bowl inside"]
    return Observation(main_images=imgs, task_descriptions=tasks, states=torch.randn(3, 8, generator=gen))
