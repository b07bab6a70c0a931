"""The critic and explore-noise heads: RLinf's parameter names, shapes, ranges and strict loading."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf_policy_openpi.heads import ExploreNoiseNet, ValueHead, load_head, value_hidden_sizes_from


def test_value_head_has_rlinf_keys_and_relu_mlp():
    head = ValueHead(64, (32, 16, 8))
    assert sorted(head.state_dict()) == [f"mlp.{i}.{p}" for i in (0, 2, 4, 6) for p in ("bias", "weight")]
    assert [type(m).__name__ for m in head.mlp] == ["Linear", "ReLU"] * 3 + ["Linear"]
    assert head.mlp[6].bias is not None and torch.count_nonzero(head.mlp[6].bias) == 0
    x = torch.randn(5, 64)
    h = x
    for i in (0, 2, 4):
        h = torch.relu(h @ head.mlp[i].weight.T + head.mlp[i].bias)
    torch.testing.assert_close(head(x), h @ head.mlp[6].weight.T + head.mlp[6].bias)


def test_value_hidden_sizes_read_from_a_checkpoint():
    assert value_hidden_sizes_from(ValueHead(64, (1024, 512, 256)).state_dict()) == (1024, 512, 256)
    assert value_hidden_sizes_from({}) is None


def test_explore_noise_net_keys_and_std_range():
    net = ExploreNoiseNet(48, 32, noise_logvar_range=(0.08, 0.16))
    assert sorted(net.state_dict()) == [
        f"mlp_logvar.moduleList.{i}.linear_1.{p}" for i in range(3) for p in ("bias", "weight")
    ]
    assert [net.mlp_logvar.moduleList[i].linear_1.out_features for i in range(3)] == [128, 64, 32]
    for scale in (0.0, 1.0, 100.0):  # tanh squashing: always within [0.08, 0.16]
        std = net(torch.randn(3, 5, 48) * scale).detach()
        assert std.shape == (3, 5, 32)
        assert float(std.min()) >= 0.08 - 1e-6 and float(std.max()) <= 0.16 + 1e-6
    feats = torch.randn(2, 48)
    raw = torch.tanh(net.mlp_logvar(feats))
    lo, hi = math.log(0.08**2), math.log(0.16**2)
    torch.testing.assert_close(net(feats), torch.exp(0.5 * (lo + (hi - lo) * (raw + 1) / 2)))
    with pytest.raises(ValueError, match="min_std"):
        ExploreNoiseNet(4, 4, noise_logvar_range=(0.2, 0.1))


def test_load_head_is_strict_and_ignores_rlinf_logvar_buffers():
    src, dst = ValueHead(16, (8, 4, 2)), ValueHead(16, (8, 4, 2))
    state = src.state_dict()
    load_head(dst, state, "value_head", "ckpt")
    x = torch.randn(3, 16)
    torch.testing.assert_close(dst(x), src(x))
    with pytest.raises(ValueError, match=r"ckpt lacks value_head\.mlp\.0\.bias"):
        load_head(dst, {k: v for k, v in state.items() if k != "mlp.0.bias"}, "value_head", "ckpt")
    with pytest.raises(ValueError, match=r"unexpected value_head\.mlp\.8\.weight"):
        load_head(dst, {**state, "mlp.8.weight": torch.zeros(1)}, "value_head", "ckpt")
    with pytest.raises(ValueError, match=r"shape \(8, 16\).*expects \(8, 32\)"):
        load_head(ValueHead(32, (8, 4, 2)), state, "value_head", "ckpt")
    net = ExploreNoiseNet(8, 4)
    noise_state = dict(ExploreNoiseNet(8, 4).state_dict())
    noise_state["logvar_min"] = torch.tensor([-5.0])  # RLinf saves its buffers: derived, ignored
    load_head(net, noise_state, "noise_head", "ckpt")
