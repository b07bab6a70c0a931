"""PPO losses as pure functions over masked tensors of any (matching) shape."""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, denom: float | torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (or ``sum / denom`` when a denominator is given)."""
    mask = mask.to(x.dtype)
    total = (x * mask).sum()
    if denom is None:
        denom = mask.sum()
    return total / torch.clamp(torch.as_tensor(denom, dtype=x.dtype, device=x.device), min=1.0)


def ppo_actor_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None = None,
    denom: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate with asymmetric clip and optional dual clip (Ye et al., 2020).

    ``L = max(−A·ρ, −A·clip(ρ, 1 − low, 1 + high))``; with ``clip_ratio_c`` (> 1) and A < 0 the
    loss is further capped at ``c·|A|``. Returns the masked loss and detached diagnostics:
    ``approx_kl`` (k3 estimator, ≥ 0), ``clip_fraction`` (share of entries where the clipped term is
    active), ``clipped_ratio`` (mean clipped ratio), ``ratio``, ``dual_clip_fraction``.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss1 = -advantages * ratio
    loss2 = -advantages * clipped
    loss = torch.maximum(loss1, loss2)
    dual = torch.zeros_like(loss, dtype=torch.bool)
    if clip_ratio_c is not None:
        cap = clip_ratio_c * advantages.abs()
        dual = (advantages < 0) & (loss > cap)
        loss = torch.where(dual, cap, loss)
    policy_loss = masked_mean(loss, mask, denom)
    with torch.no_grad():
        m = mask.to(torch.bool)
        stats = {
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, m),
            "clip_fraction": masked_mean((loss2 > loss1).to(loss.dtype), m),
            "clipped_ratio": masked_mean(clipped, m),
            "ratio": masked_mean(ratio, m),
            "dual_clip_fraction": masked_mean(dual.to(loss.dtype), m),
        }
    return policy_loss, stats


KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-entry estimate of ``KL(π_θ ‖ π_ref)`` from the log-probs of actions sampled from (about) π_θ.

    With ``d = log π_ref(a) − log π_θ(a)`` (Schulman, "Approximating KL divergence", 2020):
    ``k1 = −d`` (unbiased, can be negative), ``k2 = d² / 2`` (biased, low variance) and
    ``k3 = eᵈ − d − 1`` (unbiased, ≥ 0, low variance; GRPO's penalty, verl's ``low_var_kl``). ``d`` is clamped
    to ``[−20, 20]`` before ``k3``'s exponential. Shapes match; any shape.
    """
    d = ref_logprobs - logprobs
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        d = d.clamp(-20.0, 20.0)
        return torch.exp(d) - d - 1.0
    raise ValueError(f"kl estimator must be one of {', '.join(KL_ESTIMATORS)}, got {estimator!r}")


def huber(x: torch.Tensor, delta: float) -> torch.Tensor:
    absx = x.abs()
    return torch.where(absx <= delta, 0.5 * x**2, delta * (absx - 0.5 * delta))


def ppo_critic_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float | None = 0.2,
    huber_delta: float | None = 10.0,
    denom: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss ``max(ℓ(R − V), ℓ(R − V_clip))`` with ℓ = Huber(δ) (or ½x² if δ is None).

    ``value_clip_ratio`` is the masked share of entries where the clipped term is strictly the
    larger one, i.e. where clipping really changed the loss (RLinf's version compares
    ``|V_clip − V_old|`` with the clip range, which is only true through rounding).
    """
    loss_fn = (lambda x: huber(x, huber_delta)) if huber_delta is not None else (lambda x: 0.5 * x**2)
    unclipped = loss_fn(returns - values)
    if value_clip is not None:
        v_clip = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        clipped = loss_fn(returns - v_clip)
        loss = torch.maximum(unclipped, clipped)
        active = clipped > unclipped
    else:
        loss = unclipped
        active = torch.zeros_like(loss, dtype=torch.bool)
    value_loss = masked_mean(loss, mask, denom)
    with torch.no_grad():
        stats = {"value_clip_ratio": masked_mean(active.to(loss.dtype), mask.to(torch.bool))}
    return value_loss, stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 − Var(R − V) / Var(R)`` over the mask (NaN when Var(R) is 0)."""
    m = mask.to(torch.bool)
    v, r = values[m].double(), returns[m].double()
    if r.numel() < 2:
        return torch.tensor(float("nan"))
    var_r = r.var(unbiased=False)
    if var_r == 0:
        return torch.tensor(float("nan"))
    return (1.0 - (r - v).var(unbiased=False) / var_r).float()
