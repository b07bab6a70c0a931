"""Lightning strategies for RL fine-tuning that run on CPU (gloo, CI) and on GPUs unchanged.

Pick one in the config (``trainer.strategy``); every rank runs its own envs on its own share of
initial states, and the module gathers metrics over all ranks:

* ``ddp`` (Lightning's): a full replica per rank, gradients all-reduced.
* :class:`FSDP2Strategy`: FSDP2 (``fully_shard``) data parallelism through Lightning's
  ``ModelParallelStrategy``; parameters, gradients and optimizer state are sharded over ranks.
  :class:`rlinf_core.RLModule` shards the policy in ``configure_model`` (:func:`shard_policy`).
* :class:`DeepSpeedStrategy`: Lightning's DeepSpeed strategy (ZeRO stage 1/2) that also runs on
  CPU; on CUDA it is the stock strategy.

Rollouts and evals call the policy a different number of times on each rank (episodes end at
different times), so a sharded policy must not communicate there: :func:`rollout_mode` gathers
the full parameters once (a collective every rank enters at the same point), keeps them for the
whole rollout, and frees them afterwards — the rollout model exists only during the rollout.
It can also move the optimizer state to CPU for the rollout (``offload_optimizer``), which frees
accelerator memory for inference batches and simulators while it is not needed.

Stock Lightning refuses ``deepspeed`` on CPU; :class:`DeepSpeedStrategy` changes only what is needed for
CPU, through the strategy's public methods (``setup_environment``, ``setup_distributed``, ``root_device``,
``connect``).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator, Literal

import torch
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy
from lightning.pytorch.strategies import DeepSpeedStrategy as _LightningDeepSpeedStrategy
from torch import nn

from rlinf_core.foundation.trainer import attached_trainer

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class FSDP2Strategy(ModelParallelStrategy):
    """FSDP2 (``torch.distributed.fsdp.fully_shard``) data parallelism, on CPU or GPU.

    Args:
        data_parallel_size: ranks that shard the policy (``auto``: all ranks / tensor_parallel_size).
        tensor_parallel_size: kept at 1 (rlinf shards data-parallel only).
        reshard_after_forward: free gathered parameters after each block's forward in training
            (less memory, one more all-gather in backward).
        wrap_modules: class names of the blocks that become FSDP units (default: the policy's
            ``_no_split_modules`` from Hugging Face models, else its direct children with
            parameters); the policy itself is always the root unit.
        param_dtype: compute dtype of gathered parameters (``bfloat16`` on GPUs); the sharded
            parameters, gradients and optimizer state stay float32 and gradients are reduced in
            float32. ``null``: bf16 when the trainer's precision is ``bf16-mixed`` (fp16 for
            ``16-mixed``), else the parameters' dtype.
        **kwargs: ``ModelParallelStrategy`` arguments (``save_distributed_checkpoint``,
            ``process_group_backend``, ``timeout``).
    """

    def __init__(
        self,
        data_parallel_size: int | Literal["auto"] = "auto",
        tensor_parallel_size: int = 1,
        reshard_after_forward: bool = True,
        wrap_modules: list[str] | None = None,
        param_dtype: Literal["float32", "bfloat16", "float16"] | None = None,
        **kwargs: Any,
    ) -> None:
        if tensor_parallel_size != 1:
            raise ValueError("FSDP2Strategy shards data-parallel only: set tensor_parallel_size: 1")
        super().__init__(data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size, **kwargs)
        self.reshard_after_forward = reshard_after_forward
        self.wrap_modules = list(wrap_modules) if wrap_modules else None
        self.param_dtype = param_dtype

    def setup_environment(self) -> None:
        if self._data_parallel_size == "auto":
            # Lightning's "auto" is one data-parallel rank per node (tensor parallelism inside it) and it has no
            # public setter for the size once the world is known: data parallelism over every rank is set here
            self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()


class DeepSpeedStrategy(_LightningDeepSpeedStrategy):
    """Lightning's DeepSpeed strategy, also on CPU (gloo); on CUDA it is the stock strategy.

    Gradient clipping uses the module's ``optim.clip_grad`` (DeepSpeed clips inside its step)
    unless the DeepSpeed ``config`` sets ``gradient_clipping``. ZeRO stages 1 and 2 keep full
    parameters on every rank and fit RL rollouts; stage 3 is refused (its per-module parameter
    fetches would need the same number of policy calls on every rank during rollouts).

    Args:
        stage: ZeRO stage (1 or 2).
        build_shm_op: on CPU, let DeepSpeed JIT-build its shared-memory communication op
            (45-90 s with a compiler on first use); off: plain gloo collectives.
        **kwargs: ``lightning.pytorch.strategies.DeepSpeedStrategy`` arguments (``config``,
            ``offload_optimizer``, ``allgather_bucket_size``, ...).
    """

    def __init__(self, stage: int = 2, build_shm_op: bool = False, **kwargs: Any) -> None:
        if stage not in (0, 1, 2):
            raise ValueError(
                f"DeepSpeedStrategy supports ZeRO stages 0-2 for RL (got {stage}); for sharded parameters use "
                "rlinf_core.distributed.strategies.FSDP2Strategy"
            )
        if kwargs.get("logging_batch_size_per_gpu") in (None, "auto"):
            # "auto" reads the dataloader's batch_size, which RL's step counter loader does not have
            kwargs["logging_batch_size_per_gpu"] = 1
        super().__init__(stage=stage, **kwargs)
        self.build_shm_op = build_shm_op

    @property
    def root_device(self) -> torch.device:
        device = super().root_device
        # on CPU, this rank's device is named by its local rank: Lightning hands root_device.index to DeepSpeed as
        # its device rank (None would fail DeepSpeed's rank check); a tensor moved to cpu:N is a plain CPU tensor
        return torch.device("cpu", self.local_rank) if device.type == "cpu" else device

    def connect(self, model) -> None:
        super().connect(model)
        # the module's optim.clip_grad becomes DeepSpeed's gradient_clipping (DeepSpeed clips inside its step)
        # unless the DeepSpeed config sets it: Lightning later fills in trainer.gradient_clip_val, 0.0 = never
        clip = getattr(getattr(model, "optim_cfg", None), "clip_grad", None)
        if isinstance(self.config, dict) and "gradient_clipping" not in self.config and clip is not None:
            self.config["gradient_clipping"] = float(clip)

    def setup_environment(self) -> None:
        if self.root_device.type != "cpu":
            return super().setup_environment()
        if not self.build_shm_op:
            _skip_deepspeed_shm_op()
        DDPStrategy.setup_environment(self)  # Lightning's DeepSpeed strategy refuses CPU here

    def setup_distributed(self) -> None:
        if self.root_device.type != "cpu":
            return super().setup_distributed()
        # Lightning's gloo process group; deepspeed.initialize adopts an initialized torch.distributed
        DDPStrategy.setup_distributed(self)


def _skip_deepspeed_shm_op() -> None:
    """Mark DeepSpeed's CPU shared-memory communication op as unavailable in DeepSpeed's own op table, so that its
    communication backend uses plain gloo instead of JIT-compiling the op (45-90 s, and it needs ninja and a
    compiler). DeepSpeed has no setting for this (deepspeed/comm/torch.py ``build_shm_op`` consults
    ``deepspeed.ops.__compatible_ops__``, a table DeepSpeed keeps editable); tests/scale/test_strategy_helpers.py
    checks that DeepSpeed then skips the op."""
    import deepspeed.ops
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False


# ---------------------------------------------------------------------------------------------
# hooks used by rlinf_core.RLModule
# ---------------------------------------------------------------------------------------------
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


def deepspeed_step(strategy, optimizer, freeze_actor: bool = False) -> torch.Tensor:
    """Optimizer step under DeepSpeed (it clips with ``gradient_clipping``); returns the grad norm.

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
    optimizer.step()
    for group, lr in frozen:
        group["lr"] = lr
    norm = engine.get_global_grad_norm()
    return torch.as_tensor(0.0 if norm is None else float(norm))


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
