"""When a micro-batch's gradients are reduced (DDP once per minibatch, DeepSpeed at the accumulation boundary) and
DeepSpeed's optimizer step."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from lightning.pytorch.strategies import DeepSpeedStrategy as _LightningDeepSpeedStrategy


def deepspeed_engine(strategy) -> Any:
    """The DeepSpeed engine when training under a DeepSpeed strategy, else ``None``."""
    if isinstance(strategy, _LightningDeepSpeedStrategy):
        return strategy.model
    return None


def backward_sync(strategy, enabled: bool):
    """Context for a micro-batch backward: with ``enabled=False`` DDP keeps the gradients local
    (``no_sync``) so that a minibatch's micro-batches are all-reduced once, at its last backward.
    Other strategies reduce on their own schedule (FSDP2 every backward, DeepSpeed at the boundary).

    Wrapping only the backward suffices with manual optimization: Lightning's DDP forward redirection
    keeps DDP's forward from arming the gradient reducer (``require_backward_grad_sync`` is off
    after the inner forward), so it is armed only by ``manual_backward`` when sync is on here
    (checked with a comm hook in tests/scale: one all-reduce per bucket per optimizer step)."""
    model = getattr(strategy, "model", None)
    if enabled or not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return nullcontext()  # (Lightning's block_backward_sync would also catch DeepSpeed's engine)
    return model.no_sync()


def set_accumulation_boundary(strategy, is_last: bool) -> None:
    """Tell DeepSpeed whether the next backward ends a minibatch (it reduces gradients there)."""
    engine = deepspeed_engine(strategy)
    if engine is not None:
        engine.set_gradient_accumulation_boundary(is_last)


def deepspeed_step(strategy, optimizer, freeze_actor: bool = False) -> tuple[torch.Tensor, bool]:
    """Optimizer step under DeepSpeed (it clips with ``gradient_clipping``); returns the grad norm and whether the
    step was applied (DeepSpeed's fp16 mode skips a step whose gradients overflowed and lowers its loss scale: its
    engine's ``skipped_steps`` counts them).

    ``freeze_actor`` (critic warm-up): every parameter group not named ``critic`` runs at learning
    rate 0 for this step (DeepSpeed keeps the gradients in its own partitions, so they cannot
    simply be dropped).
    """
    engine = deepspeed_engine(strategy)
    inner = optimizer.optimizer if hasattr(optimizer, "optimizer") else optimizer
    frozen = []
    if freeze_actor:
        for group in inner.param_groups:
            if group.get("name") != "critic":
                frozen.append((group, group["lr"]))
                group["lr"] = 0.0
    skipped = engine.skipped_steps
    optimizer.step()
    for group, lr in frozen:
        group["lr"] = lr
    norm = engine.get_global_grad_norm()
    return torch.as_tensor(0.0 if norm is None else float(norm)), engine.skipped_steps == skipped
