"""Flow-matching denoising as a stochastic policy: the per-step Gaussians of RLinf's π0 / π0.5 RL samplers.

Convention (openpi): ``t = 1`` is noise, ``t = 0`` the action, ``x_t = t·ε + (1 − t)·a`` and the network
predicts the velocity ``v ≈ ε − a``. A sampler walks the grid ``τ_0 = 1 > τ_1 > … > τ_N = 0`` (see
:func:`timestep_grid`); step ``i`` maps ``x_{τ_i}`` to ``x_{τ_{i+1}} ~ N(mean_i, std_i²)`` where the mean and
std come from :func:`step_mean_std`. With ``std = 0`` (``flow_ode``) this is the Euler step
``x + (τ_{i+1} − τ_i)·v``; the other methods inject noise whose log-density is the policy's log-prob.

Shapes: B = batch, N = denoise steps, H = action horizon, A = model action width (32). All functions are
pure (no module state) and differentiable in ``v`` and ``noise_std``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

NoiseMethod = Literal["flow_ode", "flow_sde", "flow_cps", "flow_noise"]
NOISE_METHODS: tuple[str, ...] = ("flow_ode", "flow_sde", "flow_cps", "flow_noise")
GREEDY = -1  #: denoise index of a row sampled by the ODE alone (``do_sample=False``): log-prob 0


def timestep_grid(num_steps: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``float32 [N + 1]``: ``τ_i = 1 − i/N`` for ``i < N`` (``linspace(1, 1/N, N)``, as RLinf) and ``τ_N = 0``."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    grid = torch.linspace(1, 1 / num_steps, num_steps, device=device)
    return torch.cat([grid, torch.zeros(1, device=device)])


def predicted_endpoints(x_t: torch.Tensor, v_t: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The straight-line endpoints through ``x_t`` with velocity ``v_t``: ``x0̂ = x_t − t·v`` (action) and
    ``x1̂ = x_t + (1 − t)·v`` (noise). ``x_t, v_t: [B, H, A]``, ``t`` broadcastable (``[B, 1, 1]``)."""
    return x_t - v_t * t, x_t + v_t * (1 - t)


def sde_sigmas(grid: torch.Tensor, noise_level: float | torch.Tensor) -> torch.Tensor:
    """flow_sde's per-step noise scale ``[N]``: ``σ_i = noise_level·√(τ_i / (1 − τ'_i))`` with ``τ' = τ`` except
    that the ``τ = 1`` entry is replaced by ``τ_1`` (it would divide by zero)."""
    denom = torch.where(grid == 1, grid[1], grid)
    return noise_level * torch.sqrt(grid / (1 - denom))[:-1]


def step_mean_std(
    x_t: torch.Tensor,
    v_t: torch.Tensor,
    grid: torch.Tensor,
    idx: torch.Tensor,
    method: str,
    noise_level: float | torch.Tensor = 0.5,
    noise_std: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Gaussian ``N(mean, std²)`` of the next sample at denoise step ``idx`` (RLinf's ``sample_mean_var_val``).

    With ``t = τ_idx``, ``Δ = τ_idx − τ_{idx+1}`` and ``s = t − Δ``:

    * ``flow_ode``: ``mean = x0̂·(1 − s) + x1̂·s``, ``std = 0``;
    * ``flow_sde``: ``mean = x0̂·(1 − s) + x1̂·(s − σ_i²·Δ / (2t))``, ``std = √Δ·σ_i`` (:func:`sde_sigmas`);
    * ``flow_cps``: ``mean = x0̂·(1 − s) + x1̂·s·cos(π·nl/2)``, ``std = s·sin(π·nl/2)``;
    * ``flow_noise``: the ODE mean, ``std = noise_std`` (the explore-noise head's output).

    Args:
        x_t: ``[B, H, A]`` sample at ``τ_idx``.
        v_t: ``[B, H, A]`` velocity predicted at ``(x_t, τ_idx)``.
        grid: ``[N + 1]`` :func:`timestep_grid`.
        idx: ``long [B]`` step index per row, in ``[0, N − 1]``.
        method: one of :data:`NOISE_METHODS`.
        noise_level: ``nl`` of flow_sde / flow_cps: a float, a 0-dim tensor or one per row ``[B]``.
        noise_std: ``[B, H, A]`` std of flow_noise.

    Returns:
        ``mean [B, H, A]`` and ``std [B, H, A]`` (zeros for flow_ode).
    """
    t = grid[idx].view(-1, 1, 1).to(x_t.dtype)
    delta = (grid[idx] - grid[idx + 1]).view(-1, 1, 1).to(x_t.dtype)
    s = t - delta
    x0_hat, x1_hat = predicted_endpoints(x_t, v_t, t)
    if method in ("flow_ode", "flow_noise"):
        mean = x0_hat * (1 - s) + x1_hat * s
        if method == "flow_ode":
            std = torch.zeros_like(mean)
        else:
            if noise_std is None:
                raise ValueError("flow_noise needs noise_std (the explore-noise head's output)")
            std = noise_std.expand_as(mean)
    elif method == "flow_sde":
        sigma = (sde_sigmas(grid, 1.0)[idx] * _per_row(noise_level, idx)).view(-1, 1, 1).to(x_t.dtype)
        mean = x0_hat * (1 - s) + x1_hat * (s - sigma**2 * delta / (2 * t))
        std = (torch.sqrt(delta) * sigma).expand_as(mean)
    elif method == "flow_cps":
        angle = (math.pi * _per_row(noise_level, idx) / 2).view(-1, 1, 1).to(x_t.dtype)
        mean = x0_hat * (1 - s) + x1_hat * s * torch.cos(angle)
        std = (s * torch.sin(angle)).expand_as(mean)
    else:
        raise ValueError(f"noise_method {method!r} not supported; use one of {', '.join(NOISE_METHODS)}")
    return mean, std


def _per_row(noise_level: float | torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``noise_level`` as ``[B]`` (a scalar is broadcast over the rows of ``idx``)."""
    nl = torch.as_tensor(noise_level, dtype=torch.float32, device=idx.device)
    return nl.expand(idx.shape) if nl.dim() == 0 else nl


def gaussian_logprob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Element-wise ``log N(x; mean, std²) = −log σ − ½·log 2π − ½·((x − μ)/σ)²``, and 0 where ``σ = 0``
    (a deterministic step carries no log-prob). All broadcastable; returns their broadcast shape."""
    zero = std == 0
    safe = torch.where(zero, torch.ones_like(std), std)
    logp = -torch.log(safe) - 0.5 * math.log(2 * math.pi) - 0.5 * ((x - mean) / safe) ** 2
    return torch.where(zero, torch.zeros_like(logp), logp)


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Element-wise ``½·log(2πe·σ²)``, and 0 where ``σ = 0``."""
    zero = std == 0
    safe = torch.where(zero, torch.ones_like(std), std)
    ent = 0.5 * torch.log(2 * math.pi * math.e * safe**2)
    return torch.where(zero, torch.zeros_like(ent), ent)


def annealed_noise_level(step: int, start: float, end: float, anneal_steps: int) -> float:
    """``noise_anneal``: ``start → end`` linearly over ``anneal_steps`` RL steps, then ``end``
    (RLinf's ``noise_params = [start, end, anneal_steps]``)."""
    if anneal_steps <= 0:
        return float(end)
    return float(start + (end - start) * min(step, anneal_steps) / anneal_steps)


def sample_denoise_index(num_steps: int, ignore_last: bool, generator: torch.Generator | None = None) -> int:
    """The one stochastic step of a rollout batch: uniform in ``[0, N − 1]`` (``[0, N − 2]`` with ``ignore_last``,
    which keeps the last, action-producing step deterministic). Drawn from torch's RNG (reproducible)."""
    high = num_steps - 1 if ignore_last else num_steps
    if high < 1:
        raise ValueError(
            f"ignore_last needs num_steps >= 2 (a step other than the last to inject noise), got {num_steps}"
        )
    return int(torch.randint(0, high, (1,), generator=generator).item())


def joint_logprob(x1: torch.Tensor, step_logprobs: torch.Tensor) -> torch.Tensor:
    """``joint_logprob``: the mean over the chain's N + 1 terms, ``log N(x_1; 0, I)`` and each transition's
    log-prob. ``x1: [B, ...]`` the initial noise, ``step_logprobs: [B, N, ...]`` → ``[B, ...]``."""
    prior = gaussian_logprob(x1, torch.zeros_like(x1), torch.ones_like(x1))
    return torch.cat([prior.unsqueeze(1), step_logprobs], dim=1).mean(dim=1)


def joint_entropy(std_steps: torch.Tensor) -> torch.Tensor:
    """Entropy counterpart of :func:`joint_logprob`: mean of the N(0, I) prior's and each step's entropy.
    ``std_steps: [B, N, ...]`` → ``[B, ...]``."""
    prior = gaussian_entropy(torch.ones_like(std_steps[:, :1]))
    return torch.cat([prior, gaussian_entropy(std_steps)], dim=1).mean(dim=1)


__all__ = [
    "GREEDY",
    "NOISE_METHODS",
    "NoiseMethod",
    "annealed_noise_level",
    "gaussian_entropy",
    "gaussian_logprob",
    "joint_entropy",
    "joint_logprob",
    "predicted_endpoints",
    "sample_denoise_index",
    "sde_sigmas",
    "step_mean_std",
    "timestep_grid",
]
