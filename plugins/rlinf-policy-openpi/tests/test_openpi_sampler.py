"""The RL sampler on a small velocity network: rollout log-probs == recompute for every noise method."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rlinf_core.testing.numerics import reorder_rtol
from rlinf_policy_openpi import flow
from rlinf_policy_openpi.heads import ExploreNoiseNet
from rlinf_policy_openpi.sampler import FlowSampler

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

B, H, A, W = 4, 3, 5, 16
# Two float32 evaluations of one step's Gaussian (the rollout's and the recompute's, or a formula's) may differ by
# reordered sums: in the velocity, at most reorder_rtol(W, 4) of its size (sums of <= W = 16 terms, 4 in a row: the
# net and the noise head), ≤ 3 here. A Gaussian log-density moves by |x - mean| / std² per unit of mean: with
# |x - mean| <= 5 std (draws within 5 standard deviations) and std >= 0.08 (flow_noise's floor; flow_sde's std is
# larger) that is <= 5 / 0.08. The std's own rounding adds |z² - 1| / std per unit of std, of the same size.
LOGPROB_ATOL = 2 * reorder_rtol(W, 4) * 3 * 5 / 0.08


class VelocityNet(nn.Module):
    """``(x_t, t) -> (v, features)`` like the action expert's suffix pass."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(A + 1, W)
        self.out = nn.Linear(W, A)

    def forward(self, x, t):
        feats = torch.tanh(self.inp(torch.cat([x, t.view(-1, 1, 1).expand(-1, x.shape[1], 1)], -1)))
        return self.out(feats), feats


def _setup(seed=0):
    torch.manual_seed(seed)
    return VelocityNet(), ExploreNoiseNet(W, A), torch.randn(B, H, A)


CASES = [
    ("flow_sde", False, False),
    ("flow_sde", False, True),
    ("flow_cps", False, False),
    ("flow_noise", False, False),
    ("flow_noise", True, False),
    ("flow_sde", True, False),
    ("flow_ode", False, False),
]


@pytest.mark.parametrize("method,joint,ignore_last", CASES)
def test_rollout_logprobs_equal_recompute(method, joint, ignore_last):
    net, noise, x1 = _setup()
    sampler = FlowSampler(num_steps=4, noise_method=method, joint_logprob=joint, ignore_last=ignore_last)
    nonzero = 0
    for seed in range(6):  # several denoise indices
        torch.manual_seed(seed)
        out = sampler.sample(net, x1, do_sample=True, temperature=1.3, noise_level=0.6, noise_std_fn=noise)
        assert out.chains.shape == (B, 5, H, A) and out.denoise_inds.shape == (B,)
        assert (out.denoise_inds == out.denoise_inds[0]).all(), "one denoise index per batch"
        if ignore_last:
            assert int(out.denoise_inds[0]) <= 2
        logp, ent = sampler.logprob(
            net, out.chains, out.denoise_inds, temperature=1.3, noise_level=torch.full((B,), 0.6), noise_std_fn=noise
        )
        torch.testing.assert_close(logp, out.logprobs, rtol=0, atol=LOGPROB_ATOL)
        assert logp.requires_grad and ent.shape == logp.shape
        torch.testing.assert_close(out.actions, out.chains[:, -1])
        nonzero += int(float(out.logprobs.abs().sum()) > 0)
    # flow_cps's last step has std (t − Δ)·sin(·) = 0: a deterministic step, log-prob 0 as in RLinf
    assert nonzero == 0 if method == "flow_ode" else nonzero > 0


def test_only_the_chosen_step_is_stochastic():
    net, _, x1 = _setup()
    sampler = FlowSampler(num_steps=5, noise_method="flow_sde")
    torch.manual_seed(3)
    out = sampler.sample(net, x1, do_sample=True, noise_level=0.5)
    k = int(out.denoise_inds[0])
    grid = flow.timestep_grid(5)
    with torch.no_grad():
        for i in range(5):
            x = out.chains[:, i]
            v, _ = net(x, grid[i].expand(B))
            ode = x + (grid[i + 1] - grid[i]) * v
            if i == k:  # the one injected step: the direct flow-SDE density of the drawn sample
                assert (out.chains[:, i + 1] - ode).abs().max() > 0.1  # noise of std >= 0.11 on 60 elements
                t, d = float(grid[i]), float(grid[i] - grid[i + 1])
                tau1 = float(grid[1])
                sigma = 0.5 * math.sqrt(t / (1 - (tau1 if t == 1 else t)))
                x0, xe = x - v * t, x + v * (1 - t)
                mean = x0 * (1 - (t - d)) + xe * (t - d - sigma**2 * d / (2 * t))
                std = math.sqrt(d) * sigma
                direct = -math.log(std) - 0.5 * math.log(2 * math.pi) - 0.5 * ((out.chains[:, i + 1] - mean) / std) ** 2
                torch.testing.assert_close(out.logprobs, direct, rtol=0, atol=LOGPROB_ATOL)
            else:  # the Euler step of the same velocity: a handful of float32 operations on terms of size <= 3
                torch.testing.assert_close(out.chains[:, i + 1], ode, rtol=0, atol=reorder_rtol(W, 2) * 3)


def test_joint_logprob_is_the_mean_over_prior_and_transitions():
    net, noise, x1 = _setup()
    sampler = FlowSampler(num_steps=3, noise_method="flow_noise", joint_logprob=True)
    torch.manual_seed(0)
    out = sampler.sample(net, x1, do_sample=True, noise_std_fn=noise)
    grid = flow.timestep_grid(3)
    terms = [torch.distributions.Normal(0.0, 1.0).log_prob(x1)]
    with torch.no_grad():
        for i in range(3):
            x = out.chains[:, i]
            v, feats = net(x, grid[i].expand(B))
            mean = x + (grid[i + 1] - grid[i]) * v  # the ODE mean
            terms.append(torch.distributions.Normal(mean, noise(feats)).log_prob(out.chains[:, i + 1]))
    torch.testing.assert_close(out.logprobs, torch.stack(terms).mean(0), rtol=0, atol=LOGPROB_ATOL)


def test_greedy_is_the_ode_with_zero_logprob():
    net, noise, x1 = _setup()
    sampler = FlowSampler(num_steps=3, noise_method="flow_noise")
    torch.manual_seed(0)
    a = sampler.sample(net, x1, do_sample=False, noise_std_fn=noise)
    torch.manual_seed(1)
    b = sampler.sample(net, x1, do_sample=False, noise_std_fn=noise)
    torch.testing.assert_close(a.actions, b.actions)
    assert (a.denoise_inds == flow.GREEDY).all() and torch.count_nonzero(a.logprobs) == 0
    logp, ent = sampler.logprob(net, a.chains, a.denoise_inds, noise_std_fn=noise)
    assert torch.count_nonzero(logp) == 0 and torch.count_nonzero(ent) == 0


def test_gradients_reach_the_network_and_the_noise_head():
    net, noise, x1 = _setup()
    sampler = FlowSampler(num_steps=3, noise_method="flow_noise")
    torch.manual_seed(0)
    out = sampler.sample(net, x1, do_sample=True, noise_std_fn=noise)
    logp, ent = sampler.logprob(net, out.chains, out.denoise_inds, noise_std_fn=noise)
    (logp.sum() + ent.sum()).backward()
    assert net.out.weight.grad.abs().sum() > 0
    assert noise.mlp_logvar.moduleList[0].linear_1.weight.grad.abs().sum() > 0


def test_mismatched_chain_length_is_explained():
    net, _, x1 = _setup()
    out = FlowSampler(num_steps=3).sample(net, x1, do_sample=True)
    with pytest.raises(ValueError, match="3 denoise steps but num_steps is 4"):
        FlowSampler(num_steps=4).logprob(net, out.chains, out.denoise_inds)
    with pytest.raises(ValueError, match="flow_xyz"):
        FlowSampler(num_steps=3, noise_method="flow_xyz")
