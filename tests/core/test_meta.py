"""rlinf_core.models.meta: full-size builds on the meta device, and the flag plugins read to skip weights."""

import pytest
import torch
from torch import nn

from rlinf_core.models.meta import is_meta_init, meta_init, parameter_count


def test_meta_init_builds_without_storage_and_resets():
    assert not is_meta_init()
    with meta_init():
        assert is_meta_init()
        big = nn.Linear(50_000, 50_000)  # 2.5 G parameters: 10 GB if it were allocated
    assert big.weight.is_meta and big.weight.shape == (50_000, 50_000)
    assert parameter_count(big) == 50_000 * 50_000 + 50_000
    assert not is_meta_init()
    assert not nn.Linear(2, 2).weight.is_meta  # the default device is back


def test_meta_init_resets_after_an_error():
    with pytest.raises(RuntimeError):
        with meta_init():
            raise RuntimeError("boom")
    assert not is_meta_init()
    assert torch.zeros(1).device.type == "cpu"


def test_parameter_count_trainable_and_shared():
    lin = nn.Linear(3, 4)
    seq = nn.Sequential(lin, lin)  # shared module counted once
    lin.bias.requires_grad_(False)
    assert parameter_count(seq) == 16
    assert parameter_count(seq, trainable_only=True) == 12
