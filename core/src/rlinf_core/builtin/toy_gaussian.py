"""A small continuous-action policy: Gaussian actions with SDE-style log-probs on the tiny trunk.

Each sub-step's action is one noise-injected sampling step, ``a = μ(obs) + τ·σ·ε`` with
``ε ~ N(0, I)``: the per-step building block of flow-matching SDE samplers (π0-style), whose
log-probs are Gaussian densities of the injected noise. Log-probs are per action dimension
``[B, C, D]`` and are densities, so they can be positive (``σ < 0.4``). Greedy acting is the
noise-free step ``a = μ(obs)``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rlinf_core.builtin.toy_policy import TinyTrunkPolicy
from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.policy import ActOutput, EvaluateOutput

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_logprob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Elementwise log-density of ``x`` under ``N(mean, exp(log_std)²)``; broadcastable, e.g. ``[B, C, D]``."""
    return -0.5 * ((x - mean) * torch.exp(-log_std)) ** 2 - log_std - _HALF_LOG_2PI


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Elementwise entropy of ``N(·, exp(log_std)²)``: ``0.5 + 0.5·log 2π + log σ``."""
    return log_std + 0.5 + _HALF_LOG_2PI


class TinyGaussianPolicy(TinyTrunkPolicy):
    """Image + instruction + state → ``C × D`` continuous actions ``μ + τ·σ·ε``, with a value head.

    ``temperature`` τ scales the injected noise; log-probs are under ``N(μ, (τσ)²)``. The sampled
    pre-clip action is recorded for :meth:`evaluate`; the env gets it clipped to [-1, 1].

    Args:
        action_dim: D, action dimensions per sub-step.
        num_action_chunks: C, sub-steps per chunk.
        hidden_size: width of the trunk.
        state_dim: size of ``Observation.states`` (0: ignore states).
        add_value_head: add a critic (needed for PPO with GAE).
        init_log_std: initial ``log σ`` (state-independent, one per action dimension, learned).
        min_log_std: lower bound of ``log σ`` (keeps log-probs finite as σ shrinks).
    """

    model_type = "tiny_gaussian"

    def __init__(
        self,
        action_dim: int = 2,
        num_action_chunks: int = 2,
        hidden_size: int = 64,
        state_dim: int = 4,
        add_value_head: bool = True,
        init_log_std: float = -1.0,
        min_log_std: float = -4.0,
    ) -> None:
        super().__init__()
        if init_log_std < min_log_std:
            raise ValueError(f"init_log_std {init_log_std} is below min_log_std {min_log_std}")
        self._build_trunk(action_dim, num_action_chunks, hidden_size, state_dim, add_value_head)
        self.init_log_std = init_log_std
        self.min_log_std = min_log_std
        self.mean_head = nn.Linear(hidden_size, num_action_chunks * action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self._build_value_head()

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "init_log_std": self.init_log_std, "min_log_std": self.min_log_std}

    def _mean(self, feats: torch.Tensor) -> torch.Tensor:
        """``[B, hidden]`` → action means ``[B, C, D]`` in (-1, 1)."""
        return torch.tanh(self.mean_head(feats)).view(feats.shape[0], self.num_action_chunks, self.action_dim)

    def _log_std(self, temperature: float) -> torch.Tensor:
        """``log(τσ)``, ``[D]``."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
        return self.log_std.clamp(min=self.min_log_std) + math.log(temperature)

    @torch.no_grad()
    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        feats = self._features(obs)
        mean = self._mean(feats)
        log_std = self._log_std(temperature)  # greedy too: log-probs under the rule evaluate uses
        raw = mean + torch.randn_like(mean) * log_std.exp() if do_sample else mean
        return ActOutput(
            actions=raw.clamp(-1, 1),
            logprobs=gaussian_logprob(raw, mean, log_std),
            values=self._values(feats),
            record={"raw_actions": raw},
        )

    def evaluate(self, obs, record, *, temperature=1.0, compute_entropy=False, compute_values=False):
        if "raw_actions" not in record:
            raise KeyError(f"record lacks 'raw_actions' (has {sorted(record)}); pass ActOutput.record from act()")
        feats = self._features(obs)
        mean = self._mean(feats)
        log_std = self._log_std(temperature)
        logprobs = gaussian_logprob(record["raw_actions"].to(mean.device), mean, log_std)
        entropy = gaussian_entropy(log_std).expand_as(mean) if compute_entropy else None
        values = self._values(feats) if compute_values else None
        return EvaluateOutput(logprobs=logprobs, entropy=entropy, values=values)

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self._mean(self._features(obs)), actions.clamp(-1, 1).to(self.device).float())
