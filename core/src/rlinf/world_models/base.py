"""World-model simulator contract: a frozen generative model that predicts frames from actions.

Shapes: B = batch, C = frames per action chunk, H×W images.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class WorldModel(nn.Module):
    """Action-conditioned video model used as a simulator (frozen during RL).

    A world model keeps a per-env state (its frame/latent queue). :class:`rlinf.WorldModelEnv`
    drives it: :meth:`init_state` from initial frames, then :meth:`predict` once per chunk.
    """

    #: frames the model needs to start (first frame, or a short history for keyframe init).
    num_condition_frames: int = 1
    action_dim: int = 7

    def init_state(self, frames: torch.Tensor, actions: torch.Tensor | None = None) -> Any:
        """State for B envs from condition frames ``uint8 [B, T, H, W, 3]`` (and their actions)."""
        raise NotImplementedError

    def predict(self, state: Any, actions: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, Any]:
        """Predict ``uint8 [B, C, H, W, 3]`` frames for actions ``[B, C, D]``; return (frames, new state)."""
        raise NotImplementedError

    def select(self, state: Any, env_ids: torch.Tensor) -> Any:
        """Rows ``env_ids`` of ``state``."""
        raise NotImplementedError

    def assign(self, state: Any, env_ids: torch.Tensor, new: Any) -> Any:
        """``state`` with rows ``env_ids`` replaced by ``new``."""
        raise NotImplementedError


class RewardModel(nn.Module):
    """Scores frames: probability of task success per frame."""

    def success_prob(self, frames: torch.Tensor, instructions: list[str] | None = None) -> torch.Tensor:
        """``float [N]`` success probabilities for frames ``uint8 [N, H, W, 3]``."""
        raise NotImplementedError
