"""Rollout mode: full policy parameters on every rank while rollouts and evals run, the optimizer state on the CPU
if asked.

Rollouts and evals call the policy a different number of times on each rank (episodes end at different times), so
a sharded policy must not communicate there: :func:`rollout_mode` gathers the full parameters once (a collective
every rank enters at the same point), keeps them for the whole rollout, and frees them afterwards — the rollout
model exists only during the rollout. It can also move the optimizer state to CPU for the rollout
(``offload_optimizer``), which frees accelerator memory for inference batches and simulators while it is not needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from rlinf_core.distributed.fsdp_sharding import _fsdp_units_of, _reshard_default
from rlinf_core.distributed.grad_accumulation import deepspeed_engine
from rlinf_core.foundation.trainer import attached_trainer


def _optimizer_states(optimizer) -> Iterator[dict[str, Any]]:
    inner = getattr(optimizer, "optimizer", optimizer)  # LightningOptimizer -> torch optimizer
    yield from inner.state.values()


def _moved(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    if hasattr(value, "to_local") and hasattr(value, "device_mesh"):  # FSDP2 DTensor state: move the shard
        from torch.distributed.tensor import DTensor

        local = value.to_local().to(device)
        return DTensor.from_local(
            local, value.device_mesh, value.placements, run_check=False, shape=value.shape, stride=value.stride()
        )
    return value.to(device)


def move_optimizer_state(optimizer, device: torch.device | str) -> int:
    """Move every tensor of the optimizer state to ``device``; returns the bytes moved."""
    device = torch.device(device)
    moved = 0
    for state in _optimizer_states(optimizer):
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.device != device:
                state[key] = _moved(value, device)
                moved += value.numel() * value.element_size()
    return moved


@contextmanager
def rollout_mode(module, offload_optimizer: bool = False) -> Iterator[None]:
    """Full policy parameters on every rank for the rollout/eval, sharded again afterwards.

    FSDP2: all-gathers every unit once and disables resharding, so that the rollout's policy
    calls (their number differs per rank) do not communicate; reshards on exit. DDP, DeepSpeed
    ZeRO 1/2 and single-device training keep full parameters anyway (no-op).
    ``offload_optimizer``: move the optimizer state to CPU while inside, back on exit (a no-op on CPU).
    """
    units = _fsdp_units_of(module)
    optimizers = []
    device = getattr(module, "device", torch.device("cpu"))
    if offload_optimizer and device.type != "cpu" and attached_trainer(module) is not None:
        if deepspeed_engine(module.trainer.strategy) is None:
            optimizers = list(module.trainer.optimizers)
            for opt in optimizers:
                move_optimizer_state(opt, "cpu")
            if device.type == "cuda":
                torch.cuda.empty_cache()
    for m in units:
        m.unshard()
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m in units:
            m.reshard()
            m.set_reshard_after_forward(_reshard_default(module, m), recurse=False)
        for opt in optimizers:
            move_optimizer_state(opt, device)
