"""The policy contract: act on observations, re-evaluate what was done.

Shapes: B = batch, C = ``num_action_chunks`` (sub-steps per chunk), D = ``action_dim``.

Log-probs and entropies are returned at the finest granularity the policy has, ``[B, C, D]``
(one per action token / action dimension); the RL loop reduces them to action level (sum over D)
or chunk level (sum over C and D) as the algorithm's ``logprob_type`` asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlinf_core.contracts.observation import Observation
from rlinf_core.models.precision import under_compute_dtype


@dataclass
class ActOutput:
    """Result of :meth:`Policy.act`.

    Attributes:
        actions: ``float32 [B, C, D]`` env-scale action chunks.
        logprobs: ``float32 [B, C, D]`` log-probs of the chosen action tokens under the
            temperature-scaled (masked) distribution, also when acting greedily: what
            :meth:`Policy.evaluate` returns at the same temperature.
        values: ``float32 [B, 1]`` (chunk-level) or ``[B, C]`` (per sub-step) critic values,
            or ``None`` without a value head.
        record: the minimal tensors (each ``[B, ...]``) that :meth:`Policy.evaluate` needs besides
            the observation to recompute ``logprobs`` (e.g. action token ids, denoising chains).
    """

    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor | None = None
    record: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class EvaluateOutput:
    """Result of :meth:`Policy.evaluate`: ``logprobs`` and ``entropy`` ``[B, C, D]``, ``values``."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None


class Policy(nn.Module):
    """Base class of VLA policies.

    Subclasses set ``action_dim`` and ``num_action_chunks`` and implement :meth:`act` and
    :meth:`evaluate`; models with a critic set ``has_value_head = True`` and name the critic's
    parameters with ``value_head`` (they get ``optim.value_lr``).
    """

    action_dim: int
    num_action_chunks: int
    has_value_head: bool = False
    #: autocast dtype of ``act`` / ``evaluate`` / ``sft_loss`` (set from the policy's ``precision``,
    #: see :mod:`rlinf_core.models.precision`); ``None``: compute in the parameters' dtype
    compute_dtype: torch.dtype | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("act", "evaluate", "sft_loss"):
            fn = cls.__dict__.get(name)
            if callable(fn) and not getattr(fn, "_rlinf_compute_wrapped", False):
                setattr(cls, name, under_compute_dtype(fn))

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any) -> "Policy":
        """Load what :meth:`save_pretrained` wrote to ``path``; ``overrides`` are constructor settings
        (e.g. ``add_value_head=True``). The one loading entry used by the conformance kit and tools."""
        raise NotImplementedError(f"{cls.__name__} does not implement Policy.from_pretrained(path, **overrides)")

    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        """Choose action chunks for a batch of observations (called under ``torch.no_grad``).

        Any action distribution fits: categorical tokens, Gaussians, flow-matching samplers with
        injected noise (SDE). ``logprobs`` are log-densities for continuous actions (they may be
        positive).

        Args:
            obs: B observations (uint8 images; the policy does its own preprocessing).
            do_sample: True: draw from the policy's distribution. False: act deterministically
                (argmax tokens, the Gaussian mean, an ODE / zero-noise denoising chain): the same
                observation gives the same actions whatever the random state.
            temperature: sharpness of the sampling distribution; token policies divide logits by
                it, noise-injected samplers scale the injected noise's standard deviation by it.
                ``logprobs`` are under the distribution actually sampled from.
        """
        raise NotImplementedError

    @torch.no_grad()
    def value(self, obs: Observation) -> torch.Tensor:
        """Critic values ``float32 [B, 1]`` or ``[B, C]`` without choosing actions (bootstrap / final
        values). Default: ``act(obs).values``; policies with an expensive decode (autoregressive
        tokens, multi-step flow sampling) override it with the prefix forward the critic reads."""
        values = self.act(obs, do_sample=False).values
        if values is None:
            raise ValueError(f"{type(self).__name__} has no value head (add_value_head: true)")
        return values

    def evaluate(
        self,
        obs: Observation,
        record: dict[str, torch.Tensor],
        *,
        temperature: float = 1.0,
        compute_entropy: bool = False,
        compute_values: bool = False,
    ) -> EvaluateOutput:
        """Recompute log-probs (with grad) of the actions in ``record`` taken at ``obs``.

        Must equal :attr:`ActOutput.logprobs` of the rollout for unchanged weights.
        """
        raise NotImplementedError

    def check_prompt(self, prompt: str) -> None:
        """Raise ``ValueError`` (one line) when ``prompt`` does not fit the model's context. ``rlinf serve`` calls it
        on the connection's thread, before queuing a request, so an oversized prompt never holds the model thread
        (attention cost grows with the square of its length). Default: every prompt fits (a policy that truncates
        or pads prompts to a fixed length)."""

    def set_rl_step(self, step: int) -> None:
        """Called by the RL loop at the start of every RL step, before its rollout, with the number of RL steps
        done so far (0 first; the right count after a resume). Policies with schedules read it (e.g. π0's
        ``noise_anneal``). Default: nothing."""

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters of the critic (trained at ``value_lr``)."""
        return [p for n, p in self.named_parameters() if "value_head" in n and p.requires_grad]

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        """Behaviour-cloning loss for expert ``actions [B, C, D]`` (env scale). Optional."""
        raise NotImplementedError(f"{type(self).__name__} does not support supervised fine-tuning")

    def save_pretrained(self, path: str | Path) -> None:
        """Write the policy in Hugging Face layout (``config.json`` + safetensors)."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")
