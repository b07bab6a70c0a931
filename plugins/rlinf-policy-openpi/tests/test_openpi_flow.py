"""flow.py against the formulas of RLinf's ``sample_mean_var_val`` written out element by element here."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf_policy_openpi import flow

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_timestep_grid_ends_at_zero():
    torch.testing.assert_close(flow.timestep_grid(5), torch.tensor([1.0, 0.8, 0.6, 0.4, 0.2, 0.0]))
    torch.testing.assert_close(flow.timestep_grid(1), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="num_steps"):
        flow.timestep_grid(0)


def test_sde_sigmas_substitute_tau_one():
    nl, N = 0.5, 4
    tau = [1 - i / N for i in range(N + 1)]
    expected = []
    for i in range(N):
        denom = tau[1] if tau[i] == 1 else tau[i]  # the τ = 1 entry of the denominator is τ_1
        expected.append(nl * math.sqrt(tau[i] / (1 - denom)))
    torch.testing.assert_close(flow.sde_sigmas(flow.timestep_grid(N), nl), torch.tensor(expected))
    assert expected[0] == pytest.approx(1.0)  # 0.5·√(1 / 0.25)


def _reference(x, v, tau, i, method, nl, noise_std):
    """One element of RLinf's step ``i`` on the grid ``tau``, in plain Python floats."""
    t, delta = tau[i], tau[i] - tau[i + 1]
    x0, x1 = x - v * t, x + v * (1 - t)
    s = t - delta
    if method == "flow_ode":
        return x0 * (1 - s) + x1 * s, 0.0
    if method == "flow_noise":
        return x0 * (1 - s) + x1 * s, noise_std
    if method == "flow_cps":
        return x0 * (1 - s) + x1 * s * math.cos(math.pi * nl / 2), s * math.sin(math.pi * nl / 2)
    denom = tau[1] if tau[i] == 1 else tau[i]
    sigma = nl * math.sqrt(tau[i] / (1 - denom))
    return x0 * (1 - s) + x1 * (s - sigma**2 * delta / (2 * t)), math.sqrt(delta) * sigma


@pytest.mark.parametrize("method", ["flow_ode", "flow_cps", "flow_noise", "flow_sde"])
def test_step_mean_std_matches_the_formulas(method):
    N, nl, B, H, A = 4, 0.7, 3, 2, 3
    grid = flow.timestep_grid(N)
    tau = grid.tolist()
    x, v = _rand(B, H, A, seed=1), _rand(B, H, A, seed=2)
    noise_std = torch.rand(B, H, A, generator=torch.Generator().manual_seed(3)) * 0.1 + 0.05
    idx = torch.tensor([0, 2, 3])
    mean, std = flow.step_mean_std(x, v, grid, idx, method, nl, noise_std if method == "flow_noise" else None)
    for b in range(B):
        i = int(idx[b])
        for h in range(H):
            for a in range(A):
                xv, vv = float(x[b, h, a]), float(v[b, h, a])
                m, s = _reference(xv, vv, tau, i, method, nl, float(noise_std[b, h, a]))
                # float32 against python's float64: ~10 roundings of 2^-24 each (cos / sqrt within an ulp) on terms
                # of size <= 4 (the std: ~5 on terms <= 1)
                assert float(mean[b, h, a]) == pytest.approx(m, rel=0, abs=10 * 2**-24 * 4)
                assert float(std[b, h, a]) == pytest.approx(s, rel=0, abs=5 * 2**-24)


def test_ode_chain_is_the_euler_sampler():
    N = 5
    grid = flow.timestep_grid(N)
    x = _rand(2, 4, 3, seed=4)
    euler = x.clone()

    def velocity(z, t):  # any smooth field
        return torch.sin(z) * (1 + t)

    for i in range(N):
        idx = torch.full((2,), i)
        v = velocity(x, grid[i])
        x, std = flow.step_mean_std(x, v, grid, idx, "flow_ode")
        assert torch.count_nonzero(std) == 0
        euler = euler + (grid[i + 1] - grid[i]) * velocity(euler, grid[i])
    # the same Euler steps written otherwise: 5 steps of ~4 float32 roundings (sin within an ulp, which differs by
    # instruction set) on terms of size <= 3
    torch.testing.assert_close(x, euler, rtol=0, atol=5 * 4 * 2**-24 * 3)


def test_point_mass_velocity_lands_on_the_target():
    # data a = c: the exact velocity is (x_t − c) / t, so x0̂ = c at every step and the ODE ends at c
    c = torch.tensor([0.3, -0.2])
    N = 4
    grid = flow.timestep_grid(N)
    x = _rand(6, 1, 2, seed=5)
    for i in range(N):
        x, _ = flow.step_mean_std(x, (x - c) / grid[i], grid, torch.full((6,), i), "flow_ode")
    # exact in real arithmetic; float32: 4 steps of ~6 roundings on terms <= |x| / τ <= 4 / 0.25, so <= 1.5e-5
    torch.testing.assert_close(x, c.expand_as(x), rtol=0, atol=4 * 6 * 2**-24 * 16)


def test_unknown_method_and_missing_noise_std_are_explained():
    grid, x = flow.timestep_grid(2), torch.zeros(1, 1, 1)
    with pytest.raises(ValueError, match="flow_sde"):
        flow.step_mean_std(x, x, grid, torch.zeros(1, dtype=torch.long), "flow_xyz")
    with pytest.raises(ValueError, match="noise_std"):
        flow.step_mean_std(x, x, grid, torch.zeros(1, dtype=torch.long), "flow_noise")


def test_gaussian_logprob_and_entropy():
    x, mu = _rand(4, 3, seed=6), _rand(4, 3, seed=7)
    sigma = torch.rand(4, 3, generator=torch.Generator().manual_seed(8)) + 0.1
    normal = torch.distributions.Normal(mu, sigma)
    torch.testing.assert_close(flow.gaussian_logprob(x, mu, sigma), normal.log_prob(x))
    torch.testing.assert_close(flow.gaussian_entropy(sigma), normal.entropy())
    direct = -math.log(0.3) - 0.5 * math.log(2 * math.pi) - 0.5 * ((1.0 - 0.4) / 0.3) ** 2
    one = flow.gaussian_logprob(torch.tensor(1.0), torch.tensor(0.4), torch.tensor(0.3))
    assert float(one) == pytest.approx(direct)
    zero = torch.zeros(4, 3)
    assert torch.count_nonzero(flow.gaussian_logprob(x, mu, zero)) == 0  # σ = 0: no log-prob, no nan
    assert torch.count_nonzero(flow.gaussian_entropy(zero)) == 0
    sigma.requires_grad_(True)
    flow.gaussian_logprob(x, mu, torch.where(torch.arange(3) == 0, 0.0, sigma)).sum().backward()
    assert torch.isfinite(sigma.grad).all()


def test_noise_anneal_is_linear_then_flat():
    levels = [flow.annealed_noise_level(s, 0.7, 0.3, 400) for s in (0, 200, 400, 1000)]
    assert levels == pytest.approx([0.7, 0.5, 0.3, 0.3])


def test_one_denoise_index_per_batch():
    torch.manual_seed(0)
    seen = {flow.sample_denoise_index(5, ignore_last=False) for _ in range(200)}
    assert seen == {0, 1, 2, 3, 4}
    seen = {flow.sample_denoise_index(5, ignore_last=True) for _ in range(200)}
    assert seen == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="num_steps >= 2"):
        flow.sample_denoise_index(1, ignore_last=True)


def test_joint_logprob_includes_the_prior():
    x1 = _rand(2, 3, seed=9)
    steps = _rand(2, 4, 3, seed=10)
    prior = -0.5 * math.log(2 * math.pi) - 0.5 * x1**2
    expected = (prior + steps.sum(1)) / 5
    torch.testing.assert_close(flow.joint_logprob(x1, steps), expected)
    std = torch.rand(2, 4, 3) + 0.1
    ent = (0.5 * math.log(2 * math.pi * math.e) + (0.5 * torch.log(2 * math.pi * math.e * std**2)).sum(1)) / 5
    torch.testing.assert_close(flow.joint_entropy(std), ent)
