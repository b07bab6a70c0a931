"""What the machine and the launcher can give: devices, nodes, accelerators, precision, Lightning's own flags
(the ``trainer:`` ones and LightningCLI's ``optimizer:`` / ``lr_scheduler:``, which rlinf's modules do not use).

Checked on the parsed config before the trainer (and any process group) exists, so a run that asks for 2 nodes
without a launcher fails in one line instead of waiting forever for the other node.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rlinf_core.cli.signatures import import_config_class
from rlinf_core.foundation.signatures import constructor_parameters

TORCHRUN = (
    "torchrun --nnodes N --nproc-per-node D --node-rank $NODE_RANK --rdzv-backend c10d "
    "--rdzv-endpoint $MASTER_ADDR:29500 -m rlinf_core.cli.main fit ... on every node, or srun rlinf fit "
    "... under SLURM (docs/scaling.md, Multi-node)"
)
LAUNCHER_ENV = ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE")
PROFILERS = ("simple", "advanced", "pytorch", "xla")
# Lightning's automatic-optimization flags: RLModule optimizes manually, so Lightning would refuse them (or,
# for optimizer / lr_scheduler, they would never be used); what to set instead
IGNORED_FLAGS = {
    "accumulate_grad_batches": "model.init_args.global_batch_size (samples per optimizer step) and micro_batch_size",
    "gradient_clip_val": "model.init_args.optim.clip_grad",
    "gradient_clip_algorithm": "model.init_args.optim.clip_grad (always by norm)",
}
RENDEZVOUS_TIMEOUT_S = 600.0


def launcher() -> str | None:
    """The environment variable that shows a launcher (torchrun, SLURM, MPI) started this process."""
    return next((k for k in LAUNCHER_ENV if os.environ.get(k)), None)


def _device_count(accelerator: str) -> int | None:
    import torch

    if accelerator == "cpu":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if accelerator in ("gpu", "cuda"):
        return torch.cuda.device_count()
    if accelerator == "mps":
        return 1 if torch.backends.mps.is_available() else 0
    return None


def check_machine(trainer: dict[str, Any], warn: Callable[[str], None], training: bool = True) -> None:
    """Raise ``ValueError`` for what this machine or launcher cannot give (one line, with what to run); ``warn``
    takes what is legal but pointless. ``training``: the run trains (``fit``), so the precision must train."""
    import torch

    accelerator = str(trainer.get("accelerator") or "auto").lower()
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"trainer.accelerator: {trainer.get('accelerator')} but this machine has no CUDA GPU "
            "(or this torch build has no CUDA): use accelerator: cpu"
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ValueError("trainer.accelerator: mps but MPS (Apple GPU) is not available here: use accelerator: cpu")
    if accelerator == "tpu":
        raise ValueError("trainer.accelerator: tpu is not supported by rlinf: use gpu or cpu")
    devices = trainer.get("devices", "auto")
    count = _device_count(accelerator)
    if isinstance(devices, bool):
        raise ValueError(f"trainer.devices must be a number of devices, a list of indices or 'auto', got {devices}")
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    if isinstance(devices, int):
        if devices == 0 or devices < -1:
            raise ValueError(f"trainer.devices: {devices} asks for no device: give a number >= 1, -1 (all) or auto")
        if count is not None and devices > count:
            what = "CPU cores" if accelerator == "cpu" else f"{accelerator.upper()} devices"
            raise ValueError(
                f"trainer.devices: {devices} but this machine has {count} {what}: use at most "
                f"{count} per node; for more, run on several nodes: {TORCHRUN}"
            )
    elif isinstance(devices, list) and count is not None and any(int(d) >= count for d in devices):
        raise ValueError(f"trainer.devices: {devices} names a device this machine lacks (it has {count})")
    nodes = trainer.get("num_nodes", 1)
    if isinstance(nodes, int) and nodes > 1 and launcher() is None:
        raise ValueError(
            f"trainer.num_nodes: {nodes} needs a launcher that starts every node (this process "
            f"would wait forever for the others): {TORCHRUN}"
        )
    _check_precision_and_strategy(trainer, accelerator, warn, training)
    for key, instead in IGNORED_FLAGS.items():
        if trainer.get(key) not in (None, 1) if key == "accumulate_grad_batches" else trainer.get(key) is not None:
            raise ValueError(
                f"trainer.{key}: rlinf's RL loop optimizes manually and does not use Lightning's "
                f"{key}: set {instead} instead"
            )
    profiler = trainer.get("profiler")
    if isinstance(profiler, str) and profiler not in PROFILERS:
        raise ValueError(
            f"trainer.profiler: unknown profiler {profiler!r}: use one of {', '.join(PROFILERS)}, "
            "or a class_path of a lightning.pytorch.profilers class"
        )


def _check_precision_and_strategy(
    trainer: dict[str, Any], accelerator: str, warn: Callable[[str], None], training: bool = True
) -> None:
    precision = str(trainer.get("precision") or "32-true")
    if precision in ("64", "64-true", "double"):
        raise ValueError(
            f"trainer.precision: {precision} is not supported: policies and envs compute in float32 "
            "(or bf16): use 32-true or bf16-mixed"
        )
    if accelerator == "cpu" and precision in ("16", "16-mixed"):
        warn(
            f"trainer.precision: {precision} on CPU: Lightning has no fp16 autocast on CPU and runs in bf16; "
            "say bf16-mixed (or 32-true) to get what you ask for"
        )
    strategy = trainer.get("strategy")
    name = strategy.get("class_path", "") if isinstance(strategy, dict) else str(strategy or "")
    if training:
        _check_training_precision(precision, name, warn)
    # rlinf's own DeepSpeedStrategy also runs on CPU (gloo; CI's equivalence tests use it), Lightning's does not
    ours = name.startswith("rlinf_core.") or name == "DeepSpeedStrategy"
    if "deepspeed" in name.lower() and not ours and accelerator not in ("gpu", "cuda"):
        raise ValueError(
            f"trainer.strategy: {name} runs on CUDA GPUs only, not on {accelerator}: use ddp, or "
            "class_path: rlinf_core.distributed.strategies.DeepSpeedStrategy (also runs on CPU)"
        )


def _check_training_precision(precision: str, strategy: str, warn: Callable[[str], None]) -> None:
    """What each precision does to training (Lightning's plugins; DeepSpeed's own fp16 / bf16 modes under a
    DeepSpeed strategy, which keep fp32 master weights and scale the fp16 loss themselves)."""
    if "deepspeed" in strategy.lower():
        return
    if precision == "16-true":
        raise ValueError(
            "trainer.precision: 16-true trains fp16 weights with no loss scaling (small gradients "
            "underflow to 0, AdamW's state overflows): use 16-mixed (fp32 weights, fp16 autocast, "
            "a gradient scaler) or bf16-mixed"
        )
    if precision in ("16", "16-mixed") and strategy.rsplit(".", 1)[-1] in ("FSDP2Strategy", "ModelParallelStrategy"):
        raise ValueError(
            f"trainer.precision: {precision} with {strategy}: Lightning's ModelParallelStrategy has no "
            "gradient scaler for fp16: use bf16-mixed, or 16-mixed with ddp or DeepSpeedStrategy"
        )
    if precision == "bf16-true":
        warn(
            "trainer.precision: bf16-true stores every weight and AdamW's state in bf16: updates smaller than "
            "1/256 of a weight round away; bf16-mixed keeps fp32 master weights"
        )


def start_rendezvous_watchdog(trainer: Any, timeout_s: float | None = None) -> None:
    """Under a launcher, exit with one line if the process group has not formed ``timeout_s`` after ``fit``
    began (``RLINF_RENDEZVOUS_TIMEOUT``, default 600 s): a node that never comes otherwise means a silent wait."""
    if launcher() is None or getattr(trainer, "world_size", 1) <= 1:
        return
    timeout = float(os.environ.get("RLINF_RENDEZVOUS_TIMEOUT", timeout_s or RENDEZVOUS_TIMEOUT_S))
    world = trainer.world_size

    def watch() -> None:
        import torch.distributed as dist

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if dist.is_available() and dist.is_initialized():
                return
            time.sleep(0.2)
        addr = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        print(
            f"rlinf: error: rendezvous of {world} ranks at {addr} did not complete within {timeout:g} s: start "
            f"every node with the same MASTER_ADDR / MASTER_PORT and trainer.num_nodes x devices = {world} "
            "(RLINF_RENDEZVOUS_TIMEOUT sets the wait)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)

    threading.Thread(target=watch, name="rlinf-rendezvous-watchdog", daemon=True).start()


def check_lightning_optimizer(cfg: dict) -> None:
    """LightningCLI's ``optimizer:`` / ``lr_scheduler:`` beside a module that configures its own optimizers (every
    rlinf module: the manual optimization would step nothing)."""
    given = [key for key in ("optimizer", "lr_scheduler") if cfg.get(key)]
    model = cfg.get("model") or {}
    cls = import_config_class(model["class_path"]) if given and isinstance(model.get("class_path"), str) else None
    if cls is None:
        return
    from lightning.pytorch import LightningModule

    if getattr(cls, "configure_optimizers", None) is not LightningModule.configure_optimizers:
        optim = (
            "model.init_args.optim (lr, weight_decay, lr_warmup_steps, ...)"
            if "optim" in constructor_parameters(cls)
            else "the module's own settings"
        )
        raise ValueError(
            f"{given[0]}: is LightningCLI's, but {cls.__name__} configures its own optimizer and "
            f"schedule: remove it and set {optim}"
        )
