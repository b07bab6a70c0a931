"""The update half of an RL step, for :class:`rlinf_core.rl.module.RLModule`: the precision context shared by
rollout and update, the log-prob recompute, and the optimizer step (clipping, skipped non-finite steps, critic
warm-up)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from rlinf_core.distributed.grad_accumulation import deepspeed_engine, deepspeed_step
from rlinf_core.foundation.trainer import attached_trainer
from rlinf_core.models.precision import compute_context
from rlinf_core.rl.metrics import MetricSums
from rlinf_core.rl.algorithms.trajectory import Samples

_HALF = {"bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16, "16-mixed": torch.float16,
         "16-true": torch.float16}


def precision_context(module):
    """The trainer's precision context for rollouts, evals and updates (the same in all three, so rollout and
    update log-probs agree). DeepSpeed's bf16/fp16 mode casts the module but has no autocast; rlinf adds one so
    that float32 observations meet the half-precision weights."""
    trainer = attached_trainer(module)
    if trainer is None:
        return nullcontext()
    half = _HALF.get(str(trainer.precision))
    if half is not None and deepspeed_engine(trainer.strategy) is not None:
        return compute_context(module.device, half)
    return trainer.precision_plugin.forward_context()


@torch.no_grad()
def recompute_old_logprobs(policy, samples: Samples, micro_batch_size: int, device, temperature: float) -> float:
    """Replace ``samples.old_logprobs`` by the policy's current ones; returns this rank's largest change."""
    worst = 0.0
    for start in range(0, len(samples), micro_batch_size):
        idx = torch.arange(start, min(start + micro_batch_size, len(samples)))
        mb = samples.select(idx)
        out = policy.evaluate(
            mb.obs.to(device), {k: v.to(device) for k, v in mb.records.items()}, temperature=temperature
        )
        new = out.logprobs.float().cpu()
        worst = max(worst, float((new - mb.old_logprobs).abs().max()))
        samples.old_logprobs[idx] = new
    return worst


def optimizer_step(
    policy, strategy, optimizer, scheduler, clip_grad: float | None, actor_on: bool, metrics: MetricSums
) -> bool:
    """One optimizer step after a minibatch's backward passes; returns ``False`` when it was skipped (a
    non-finite gradient norm). Logs the gradient norm and learning rates into ``metrics``."""
    if deepspeed_engine(strategy) is not None:
        # DeepSpeed keeps the gradients in its own partitions, clips (gradient_clipping) and steps itself
        grad_norm = deepspeed_step(strategy, optimizer, freeze_actor=not actor_on)
        scheduler.step()
        metrics.add("train/actor/grad_norm", grad_norm, 1)
        optimizer.zero_grad(set_to_none=True)
        return True
    if not actor_on:
        value_ids = {id(p) for p in policy.value_parameters()}
        for p in policy.parameters():
            if id(p) not in value_ids:
                p.grad = None
    params = [p for p in policy.parameters() if p.grad is not None]
    max_norm = clip_grad if clip_grad is not None else float("inf")
    grad_norm: Any = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.tensor(0.0)
    grad_norm = torch.as_tensor(grad_norm).float()
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    stepped = bool(torch.isfinite(grad_norm))
    if stepped:
        optimizer.step()
        scheduler.step()
        metrics.add("train/actor/grad_norm", grad_norm.detach(), 1)
    optimizer.zero_grad(set_to_none=True)
    for group in optimizer.optimizer.param_groups if hasattr(optimizer, "optimizer") else optimizer.param_groups:
        name = "critic" if group.get("name") == "critic" else "actor"
        metrics.last[f"train/{name}/lr"] = float(group["lr"])
    return stepped
