"""Advantage estimators as pure functions. Time-major shapes: T steps, B env slots.

Terminated and truncated episodes are kept apart: a terminal state has value 0, a truncated
episode is bootstrapped with the value of its final observation (``bootstrap_values``), and both
stop the recursion so that nothing leaks across episode boundaries.
"""

from __future__ import annotations

import torch


# Hand-written (ten lines) rather than torchrl's generalized_advantage_estimate: it bootstraps truncations from the
# final observation's value separately from terminations, as RLinf does, and torchrl is not a dependency.
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminations: torch.Tensor,
    truncations: torch.Tensor,
    bootstrap_values: torch.Tensor | None = None,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016).

    Args:
        rewards: ``[T, B]`` reward of the transition at t.
        values: ``[T + 1, B]`` V(s_t); row T is the value of the observation after the last step.
        terminations: ``[T, B]`` the transition at t ended the episode in a terminal state.
        truncations: ``[T, B]`` the transition at t hit the time limit.
        bootstrap_values: ``[T, B]`` V(final observation) where truncated (ignored elsewhere);
            ``None`` treats truncations like terminations.
        gamma: discount.
        gae_lambda: GAE λ.

    Returns:
        ``(advantages [T, B], returns [T, B])`` with ``returns = advantages + values[:-1]``.

    ::

        next_v_t = bootstrap_t if truncated_t else (0 if terminated_t else V_{t+1})
        δ_t = r_t + γ·next_v_t − V_t
        A_t = δ_t + γλ·(1 − done_t)·A_{t+1}
    """
    T = rewards.shape[0]
    if values.shape[0] != T + 1:
        raise ValueError(f"values must have T + 1 = {T + 1} rows, got {values.shape[0]}")
    term = terminations.to(rewards.dtype)
    trunc = truncations.to(rewards.dtype)
    done = torch.clamp(term + trunc, max=1.0)
    next_values = values[1:] * (1.0 - done)
    if bootstrap_values is not None:
        next_values = next_values + bootstrap_values * trunc * (1.0 - term)
    deltas = rewards + gamma * next_values - values[:-1]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(T)):
        running = deltas[t] + gamma * gae_lambda * (1.0 - done[t]) * running
        advantages[t] = running
    return advantages, advantages + values[:-1]


SCORE_SCALES = ("group", "batch", "task", "none")


def check_score_scale(scale: str) -> str:
    """``scale`` if it is one of :data:`SCORE_SCALES`, else a ``ValueError`` naming them."""
    if scale not in SCORE_SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCORE_SCALES)}; got {scale!r}")
    return scale


def group_normalized_scores(
    scores: torch.Tensor,
    group_size: int,
    eps: float = 1e-6,
    scale: str = "group",
    batch_std: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """GRPO advantages: ``(s − mean_group(s)) / (std + eps)``.

    Args:
        scores: ``[B]`` one score per trajectory; groups are ``group_size`` consecutive entries.
        group_size: G (> 1).
        eps: added to the std.
        scale: which std divides: ``group`` (each group's, as in GRPO), ``batch`` (the std of all
            ``B`` scores: a group whose members scored almost alike keeps small advantages instead
            of noise blown up to ±1, which matters with dense rewards), ``task`` (the std of the scores of the
            trajectory's task, passed as ``batch_std``) or ``none`` (Dr. GRPO).
        batch_std: with ``scale="batch"``, the std to use instead of ``scores.std()`` (e.g. over all ranks);
            with ``scale="task"``, ``[B]`` the std of each trajectory's task.

    Returns:
        ``[B]`` advantages (unbiased stds).
    """
    if scores.shape[0] % group_size:
        raise ValueError(f"{scores.shape[0]} trajectories do not split into groups of {group_size}")
    check_score_scale(scale)
    grouped = scores.view(-1, group_size)
    centered = grouped - grouped.mean(-1, keepdim=True)
    if scale == "group":
        centered = centered / (grouped.std(-1, unbiased=True, keepdim=True) + eps)
    elif scale == "batch":
        std = scores.std(unbiased=True) if batch_std is None else batch_std
        centered = centered / (std + eps)
    elif scale == "task":
        if not isinstance(batch_std, torch.Tensor) or batch_std.shape != scores.shape:
            raise ValueError(f"scale='task' needs batch_std: one std per trajectory, shape {tuple(scores.shape)}")
        centered = centered / (batch_std.view(-1, group_size) + eps)
    return centered.reshape(-1)


def group_filter_mask(scores: torch.Tensor, group_size: int, lower: float, upper: float) -> torch.Tensor:
    """``bool [B]``: True for trajectories whose group's mean score lies in ``[lower, upper]``.

    With binary success scores, ``lower = 0.1, upper = 0.9`` drops all-fail and all-success
    groups, whose advantages are all zero (DAPO-style dynamic sampling).
    """
    mean = scores.view(-1, group_size).mean(-1, keepdim=True)
    keep = (mean >= lower) & (mean <= upper)
    return keep.expand(-1, group_size).reshape(-1)
