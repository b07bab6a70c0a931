"""Rectified flow as RLinf/opensora's ``RFLOW`` scheduler: sampling grid, timestep transform, Euler sampler, loss.

Convention: timestep ``t ∈ [0, 1000]``, 1000 = pure noise; ``x_t = (1 - t/1000) x0 + (t/1000) ε``; the network
predicts the velocity ``v = x0 - ε``; sampling integrates ``z += v · Δt / 1000`` from ``t = 1000`` towards 0.
Shapes: latents ``[B, C, T, H, W]``; ``gen_mask [B, T]`` True on generated frames.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

NUM_TIMESTEPS = 1000


def timestep_transform(t: torch.Tensor, height: float, width: float, num_frames: int) -> torch.Tensor:
    """Upstream's resolution shift of ``t`` (``[B]`` in ``[0, 1000]``).

    ``ratio = sqrt(H·W / 512²) · sqrt(4)`` (upstream hard-codes 4 frames for any video longer than one frame),
    ``t' = ratio · t / (1 + (ratio - 1) · t)`` on ``t/1000``. The identity at 256², not at other sizes
    (tiny 32² models: ratio 1/8).
    """
    ratio = math.sqrt(height * width / 512**2) * math.sqrt(4.0 if num_frames != 1 else 1.0)
    s = t / NUM_TIMESTEPS
    return ratio * s / (1 + (ratio - 1) * s) * NUM_TIMESTEPS


def sampling_timesteps(
    num_steps: int, batch: int, device: torch.device, transform: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> list[torch.Tensor]:
    """``num_steps`` timesteps ``(1 - i/N) · 1000`` (each ``[B]``), optionally transformed."""
    steps = [torch.full((batch,), (1.0 - i / num_steps) * NUM_TIMESTEPS, device=device) for i in range(num_steps)]
    return [transform(t) for t in steps] if transform is not None else steps


def add_noise(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``(1 - t/1000) x0 + (t/1000) ε`` with ``t [B]`` broadcast over ``[B, ...]``."""
    s = (1 - t.float() / NUM_TIMESTEPS).view(-1, *([1] * (x0.dim() - 1)))
    return s * x0 + (1 - s) * noise


def rflow_sample(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    z: torch.Tensor,
    gen_mask: torch.Tensor,
    timesteps: list[torch.Tensor],
) -> torch.Tensor:
    """Euler integration of ``velocity(z, t)`` over ``timesteps``, condition frames re-imposed after each step.

    Args:
        velocity: ``(z [B, C, T, H, W], t [B]) -> v`` of ``z``'s shape.
        z: condition latents with noise in the generated frames.
        gen_mask: ``[B, T]`` True on generated frames.
        timesteps: decreasing ``[B]`` timesteps; the last step goes to 0.

    Returns:
        The sampled latents ``[B, C, T, H, W]`` (condition frames unchanged).
    """
    cond = z.clone()
    keep = gen_mask[:, None, :, None, None]
    for i, t in enumerate(timesteps):
        dt = (t - timesteps[i + 1]) if i + 1 < len(timesteps) else t
        z = z + velocity(z, t) * (dt / NUM_TIMESTEPS).view(-1, 1, 1, 1, 1)
        z = torch.where(keep, z, cond)
    return z


def sample_logit_normal(batch: int, device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
    """Training timesteps ``sigmoid(N(0, 1)) · 1000`` (``LogisticNormal(0, 1)[..., 0]`` upstream), ``[B]``."""
    gen_device = generator.device if generator is not None else device
    return torch.sigmoid(torch.randn(batch, generator=generator, device=gen_device)).to(device) * NUM_TIMESTEPS


def masked_velocity_loss(pred: torch.Tensor, target: torch.Tensor, gen_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared velocity error over generated frames only (upstream ``mean_flat(..., mask)``), scalar."""
    err = (pred.float() - target.float()).pow(2).mean(dim=(1, 3, 4))  # [B, T]
    weights = gen_mask.float()
    return ((err * weights).sum(1) / weights.sum(1)).mean()
