"""AdamW with the warm-up / decay schedule of :class:`rlinf_core.rl.config.OptimConfig`, shared by the RL and SFT
modules."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlinf_core.rl.config import OptimConfig


def lr_lambda(cfg: OptimConfig, total_steps: int, start: int = 0) -> Callable[[int], float]:
    """LR factor per optimizer step: 0 before ``start``, then warm-up and decay over ``total_steps`` steps."""
    warm = max(0, cfg.lr_warmup_steps)
    floor = cfg.min_lr / cfg.lr if cfg.lr > 0 else 0.0

    def fn(step: int) -> float:
        if step < start:
            return 0.0
        step -= start
        if warm and step < warm:
            return (step + 1) / warm
        if cfg.lr_scheduler == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total_steps - warm))
        if cfg.lr_scheduler == "cosine":
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return floor + (1 - floor) * (1 - progress)

    return fn


def actor_critic_parameters(policy: torch.nn.Module) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """A policy's trainable parameters: ``(actor, critic)``, the critic being its ``value_parameters()``."""
    value_ids = {id(p) for p in policy.value_parameters()}
    params = [p for p in policy.parameters() if p.requires_grad]
    return [p for p in params if id(p) not in value_ids], [p for p in params if id(p) in value_ids]


def configure_adamw(
    cfg: OptimConfig,
    actor_params: Sequence[torch.nn.Parameter],
    critic_params: Sequence[torch.nn.Parameter] = (),
    total_steps: int = 1,
) -> dict[str, Any]:
    """Lightning's ``configure_optimizers`` answer: AdamW with an ``actor`` group (and a ``critic``
    group at ``value_lr`` if ``critic_params``), each with its LambdaLR factor stepped per optimizer step.

    The actor's schedule (warm-up, decay) starts after ``cfg.critic_warmup_steps``, when the actor starts
    training (RLinf rebuilds the optimizer there); the critic's runs from step 0.
    """
    groups = [{"params": list(actor_params), "lr": cfg.lr, "name": "actor"}]
    if critic_params:
        groups.append({"params": list(critic_params), "lr": cfg.value_lr or cfg.lr, "name": "critic"})
    opt = torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay
    )
    total = max(1, total_steps)
    start = max(0, cfg.critic_warmup_steps)
    lambdas = [lr_lambda(cfg, max(1, total - start), start=start)]
    if critic_params:
        lambdas.append(lr_lambda(cfg, total))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambdas)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
