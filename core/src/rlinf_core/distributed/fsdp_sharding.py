"""FSDP2 sharding of the policy (``configure_model``) and its export gathered into one copy on rank 0."""

from __future__ import annotations

import copy
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from rlinf_core.distributed.strategies import _DTYPES
from rlinf_core.foundation.trainer import attached_trainer


def _fsdp_units(policy: nn.Module, names: set[str]) -> list[nn.Module]:
    if names:
        found = [m for m in policy.modules() if type(m).__name__ in names and m is not policy]
        if found:
            return found
    return [m for m in policy.children() if any(True for _ in m.parameters())]


def shard_policy(module) -> None:
    """``configure_model`` hook: shard ``module.policy`` with FSDP2 under a ``ModelParallelStrategy``.

    Blocks become FSDP units bottom-up, then the policy itself; ``act`` / ``value`` /
    ``evaluate`` / ``sft_loss`` are registered as forward methods so that FSDP's hooks run for them. Keeps a
    parameter-free (meta) copy of the policy for :func:`export_policy`.
    """
    trainer = attached_trainer(module)
    if trainer is None or not isinstance(trainer.strategy, ModelParallelStrategy):
        return
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    policy = module.policy
    if isinstance(policy, FSDPModule):
        return
    strategy = trainer.strategy
    module._export_template = [_meta_copy(policy)]
    mesh = strategy.device_mesh["data_parallel"]
    kwargs: dict[str, Any] = {"mesh": mesh}
    dtype = fsdp_param_dtype(strategy, getattr(trainer, "precision", None))
    if dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=_DTYPES[dtype], reduce_dtype=torch.float32)
    names = set(getattr(strategy, "wrap_modules", None) or [])
    if not names:
        for m in policy.modules():
            names.update(getattr(m, "_no_split_modules", None) or [])
    reshard = getattr(strategy, "reshard_after_forward", True)
    units = _fsdp_units(policy, names)
    unit_ids = {id(u) for u in units}
    for m in reversed(list(policy.modules())):  # children before their parents
        if id(m) in unit_ids:
            fully_shard(m, reshard_after_forward=reshard, **kwargs)
    fully_shard(policy, **kwargs)
    for name in ("act", "value", "evaluate", "sft_loss"):
        if callable(getattr(policy, name, None)):
            register_fsdp_forward_method(policy, name)


def fsdp_param_dtype(strategy, trainer_precision: str | None) -> str | None:
    """FSDP2 compute dtype of gathered parameters: the strategy's ``param_dtype``, else bf16/fp16
    when the trainer runs ``bf16-mixed`` / ``16-mixed`` (sharded fp32 masters, one cast per gather)."""
    dtype = getattr(strategy, "param_dtype", None)
    if dtype is None and trainer_precision in ("bf16-mixed", "16-mixed"):
        dtype = "bfloat16" if trainer_precision == "bf16-mixed" else "float16"
    return dtype


def _meta_copy(policy: nn.Module) -> nn.Module:
    """A deep copy whose parameters and buffers live on the meta device (no memory)."""
    memo: dict[int, Any] = {}
    for p in policy.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in policy.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(policy, memo)


def _fsdp_modules(policy: nn.Module) -> list[nn.Module]:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover
        return []
    return [m for m in policy.modules() if isinstance(m, FSDPModule)]


def _fsdp_units_of(module) -> list[nn.Module]:
    policy = getattr(module, "policy", None)
    return _fsdp_modules(policy) if policy is not None else []


def _reshard_default(module, unit: nn.Module) -> bool:
    if unit is module.policy:
        return True
    trainer = attached_trainer(module)
    strategy = trainer.strategy if trainer is not None else None
    return getattr(strategy, "reshard_after_forward", True)


def export_policy(module, path) -> None:
    """Save the policy with ``save_pretrained`` on rank 0; under FSDP2 all ranks must call this.

    Sharded policies are gathered into the meta copy kept by :func:`shard_policy`
    (materialized on CPU on rank 0 only).
    """
    template = getattr(module, "_export_template", None)
    if not template or not _fsdp_units_of(module):
        if module.global_rank == 0:
            module.policy.save_pretrained(path)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(module.policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if module.global_rank != 0:
        return
    plain = template[0].to_empty(device="cpu")
    plain.load_state_dict(full)
    buffers = dict(module.policy.named_buffers())
    for name, buf in plain.named_buffers():
        if name in buffers:
            buf.copy_(buffers[name].detach().cpu())
    plain.save_pretrained(path)
