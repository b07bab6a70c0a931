"""Flow-matching grids of RLinf's Wan world model, on diffusers' ``FlowMatchEulerDiscreteScheduler``.

Upstream (DiffSynth ``FlowMatchScheduler(shift=5, sigma_min=0, extra_one_step=True)``) spaces ``N`` sigmas
linearly from 1 towards 0 *without* the last point and shifts them, ``σ' = 5σ / (1 + 4σ)``: for 5 steps the
timesteps are 1000, 952.4, 882.4, 769.2, 555.6, then 0. diffusers' ``set_timesteps(N)`` spaces them differently
(1000 … 24.4), so the sigmas are passed explicitly; the Euler step ``x += v · (σ_next − σ)`` is the same.
"""

from __future__ import annotations

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

NUM_TRAIN_TIMESTEPS = 1000


def inference_scheduler(num_steps: int = 5, shift: float = 5.0) -> FlowMatchEulerDiscreteScheduler:
    """A scheduler set to upstream's ``num_steps`` grid (``.timesteps [N]``, ``.sigmas [N + 1]`` ending in 0)."""
    if num_steps < 1:
        raise ValueError(f"num_inference_steps must be >= 1, got {num_steps}")
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=NUM_TRAIN_TIMESTEPS, shift=shift)
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, num_steps + 1)[:-1])
    return scheduler


def training_grid(shift: float = 5.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Upstream's 1000-point training grid: ``(timesteps [1000], sigmas [1000], loss weights [1000])``.

    The weights are DiffSynth's ``linear_timesteps_weights``: ``y = exp(-2 ((t - 500) / 1000)^2)``, shifted to a
    minimum of 0 and scaled to a mean of 1.
    """
    scheduler = inference_scheduler(NUM_TRAIN_TIMESTEPS, shift)
    timesteps = scheduler.timesteps.float()
    sigmas = scheduler.sigmas[:-1].float()
    y = torch.exp(-2 * ((timesteps - NUM_TRAIN_TIMESTEPS / 2) / NUM_TRAIN_TIMESTEPS) ** 2)
    y = y - y.min()
    return timesteps, sigmas, y * (NUM_TRAIN_TIMESTEPS / y.sum())
