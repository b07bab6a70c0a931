"""The RL sampler of RLinf's π0 / π0.5: a denoising chain with noise injected at one step (or all), and the
recompute of its log-probs from the stored chain.

The network enters as a ``denoise(x_t, t) -> (v, features)`` callable (for π0: the action expert's suffix pass
over a prefix KV cache computed once), so everything here is model-independent.

Rollout (:meth:`FlowSampler.sample`), for a batch of B rows:

* ``do_sample=True``: one denoise index ``k`` for the whole batch
  (:func:`~rlinf_policy_openpi.flow.sample_denoise_index`);
  step ``k`` uses ``noise_method``, every other step the ODE; the log-prob is step ``k``'s Gaussian log-density
  of the sample drawn. With ``joint_logprob`` every step is stochastic and the log-prob is the mean of
  ``log N(x_1; 0, I)`` and the N transitions' log-densities.
* ``do_sample=False``: the ODE at every step (index :data:`~rlinf_policy_openpi.flow.GREEDY`), log-prob 0.

The record is the chain ``[B, N + 1, H, A]`` (``x_1 … x_0``), the index ``[B]`` and the noise level ``[B]``;
:meth:`FlowSampler.logprob` recomputes the same log-probs (with grad) from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlinf_policy_openpi import flow

#: ``(x_t [B, H, A], t [B]) -> (velocity [B, H, A], features [B, H, W])``
Denoiser = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
#: flow_noise's std from the denoiser's features: ``[B, H, W] -> [B, H, A]``
NoiseStd = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class ChainSample:
    """A sampled denoising chain.

    Attributes:
        actions: ``[B, H, A]`` the chain's end ``x_0`` (normalised model actions).
        chains: ``[B, N + 1, H, A]`` every sample from ``x_1`` (the initial noise) to ``x_0``.
        denoise_inds: ``long [B]`` the stochastic step (``GREEDY`` = −1: none).
        logprobs: ``[B, H, A]`` element-wise log-probs (see the module docstring).
    """

    actions: torch.Tensor
    chains: torch.Tensor
    denoise_inds: torch.Tensor
    logprobs: torch.Tensor


@dataclass(frozen=True)
class FlowSampler:
    """Settings of the RL sampler.

    Args:
        num_steps: N denoise steps.
        noise_method: ``flow_sde`` | ``flow_noise`` | ``flow_cps`` | ``flow_ode`` (the stochastic step's kernel).
        joint_logprob: every step stochastic; log-prob = mean over the prior and the N transitions.
        ignore_last: never inject noise at the last step (k in [0, N − 2]).
    """

    num_steps: int
    noise_method: str = "flow_sde"
    joint_logprob: bool = False
    ignore_last: bool = False

    def __post_init__(self) -> None:
        if self.noise_method not in flow.NOISE_METHODS:
            known = ", ".join(flow.NOISE_METHODS)
            raise ValueError(f"noise_method {self.noise_method!r} not supported; use one of {known}")
        if self.num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {self.num_steps}")
        if self.ignore_last and self.num_steps < 2:
            raise ValueError(f"ignore_last needs num_steps >= 2, got {self.num_steps}")

    def _step(self, denoise, x, i, method, noise_level, noise_std_fn, grid):
        """Mean and std ``[B, H, A]`` of step ``i`` (``long [B]``) from ``x``; ``method`` per call."""
        v, features = denoise(x, grid[i])
        noise_std = noise_std_fn(features) if method == "flow_noise" else None
        if method == "flow_noise" and noise_std_fn is None:
            raise ValueError("noise_method flow_noise needs the explore-noise head")
        return flow.step_mean_std(x, v, grid, i, method, noise_level, noise_std)

    @torch.no_grad()
    def sample(
        self,
        denoise: Denoiser,
        x1: torch.Tensor,
        *,
        do_sample: bool,
        temperature: float = 1.0,
        noise_level: float = 0.5,
        noise_std_fn: NoiseStd | None = None,
    ) -> ChainSample:
        """Run the chain from ``x1 [B, H, A]`` (the initial noise).

        Args:
            denoise: the network's velocity at ``(x_t, t)``.
            x1: initial noise (N(0, I) draws; any fixed tensor for a deterministic ODE).
            do_sample: inject noise (at step k, or everywhere with ``joint_logprob``); False: pure ODE.
            temperature: scales the injected noise's std (log-probs are under the scaled Gaussian).
            noise_level: ``nl`` of flow_sde / flow_cps.
            noise_std_fn: flow_noise's head.
        """
        B, N = x1.shape[0], self.num_steps
        grid = flow.timestep_grid(N, x1.device)
        if not do_sample:
            k = flow.GREEDY
        elif self.joint_logprob:
            k = 0  # every step stochastic; the index is not used
        else:
            k = flow.sample_denoise_index(N, self.ignore_last)
        x, chain, logps = x1, [x1], []
        for i in range(N):
            stochastic = do_sample and (self.joint_logprob or i == k)
            method = self.noise_method if stochastic else "flow_ode"
            idx = torch.full((B,), i, dtype=torch.long, device=x1.device)
            mean, std = self._step(denoise, x, idx, method, noise_level, noise_std_fn, grid)
            std = std * temperature
            x = mean + std * torch.randn_like(mean) if stochastic else mean
            chain.append(x)
            logps.append(flow.gaussian_logprob(x, mean, std))
        steps = torch.stack(logps, dim=1)  # [B, N, H, A]
        if not do_sample:
            logprobs = torch.zeros_like(x1)
        elif self.joint_logprob:
            logprobs = flow.joint_logprob(x1, steps)
        else:
            logprobs = steps[:, k]
        inds = torch.full((B,), k, dtype=torch.long, device=x1.device)
        return ChainSample(actions=x, chains=torch.stack(chain, dim=1), denoise_inds=inds, logprobs=logprobs)

    def logprob(
        self,
        denoise: Denoiser,
        chains: torch.Tensor,
        denoise_inds: torch.Tensor,
        *,
        temperature: float = 1.0,
        noise_level: float | torch.Tensor = 0.5,
        noise_std_fn: NoiseStd | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies ``[B, H, A]`` of a stored chain (with grad): what :meth:`sample` returned.

        Rows with ``denoise_inds == GREEDY`` get 0 for both. Without ``joint_logprob`` one denoiser pass
        (step ``k`` of each row); with it, N passes.
        """
        if chains.shape[1] != self.num_steps + 1:
            raise ValueError(
                f"the stored chain has {chains.shape[1] - 1} denoise steps but num_steps is {self.num_steps}; "
                "evaluate with the num_steps the rollout used"
            )
        B = chains.shape[0]
        rows = torch.arange(B, device=chains.device)
        greedy = (denoise_inds == flow.GREEDY).view(B, 1, 1)
        grid = flow.timestep_grid(self.num_steps, chains.device)
        if self.joint_logprob:
            logps, stds = [], []
            for i in range(self.num_steps):
                idx = torch.full((B,), i, dtype=torch.long, device=chains.device)
                mean, std = self._step(denoise, chains[:, i], idx, self.noise_method, noise_level, noise_std_fn, grid)
                std = std * temperature
                logps.append(flow.gaussian_logprob(chains[:, i + 1], mean, std))
                stds.append(std)
            logp = flow.joint_logprob(chains[:, 0], torch.stack(logps, 1))
            ent = flow.joint_entropy(torch.stack(stds, 1))
        else:
            k = denoise_inds.clamp(min=0)
            mean, std = self._step(denoise, chains[rows, k], k, self.noise_method, noise_level, noise_std_fn, grid)
            std = torch.where(greedy, torch.zeros_like(std), std * temperature)
            logp = flow.gaussian_logprob(chains[rows, k + 1], mean, std)
            ent = flow.gaussian_entropy(std)
        zero = torch.zeros_like(logp)
        return torch.where(greedy, zero, logp), torch.where(greedy, zero, ent)


__all__ = ["ChainSample", "Denoiser", "FlowSampler", "NoiseStd"]
