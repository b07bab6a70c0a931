"""Lightning strategies for RL fine-tuning that run on CPU (gloo, CI) and on GPUs unchanged.

Pick one in the config (``trainer.strategy``); every rank runs its own envs on its own share of
initial states, and the module gathers metrics over all ranks:

* ``ddp`` (Lightning's): a full replica per rank, gradients all-reduced.
* :class:`FSDP2Strategy`: FSDP2 (``fully_shard``) data parallelism through Lightning's
  ``ModelParallelStrategy``; parameters, gradients and optimizer state are sharded over ranks.
  :class:`rlinf_core.RLModule` shards the policy in ``configure_model``
  (:func:`rlinf_core.distributed.fsdp_sharding.shard_policy`).
* :class:`DeepSpeedStrategy`: Lightning's DeepSpeed strategy (ZeRO stage 1/2) that also runs on
  CPU; on CUDA it is the stock strategy.

The hooks the RL module calls live beside this file, one topic each: :mod:`.fsdp_sharding` (sharding the policy,
exporting it gathered), :mod:`.grad_accumulation` (when gradients are reduced; DeepSpeed's optimizer step) and
:mod:`.rollout_mode` (full parameters and an offloaded optimizer during rollouts).

Stock Lightning refuses ``deepspeed`` on CPU; :class:`DeepSpeedStrategy` changes only what is needed for
CPU, through the strategy's public methods (``setup_environment``, ``setup_distributed``, ``root_device``,
``connect``).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy
from lightning.pytorch.strategies import DeepSpeedStrategy as _LightningDeepSpeedStrategy

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
