"""Checkpoints of RL runs: a configurable cadence, ``last.ckpt`` as a link, trainable-only LoRA checkpoints.

An RL step is one Lightning epoch. :class:`RLCheckpoint` writes one checkpoint every
``every_n_epochs`` RL steps, keeps the newest ``keep_last`` and makes ``last.ckpt`` a symbolic link
to the newest one, so every checkpoint is written once. With frozen parameters (LoRA: the base
model) it writes only the trainable parameters, the buffers and the optimizer state; on resume
:func:`restore_frozen` fills the frozen parameters in from the freshly built policy (which read
them from its ``model_path``), after checking that they are the ones the run was saved with.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy

from rlinf_core.run.checkpoint_files import fsync_dir

FROZEN_KEY = "rlinf_frozen"


class RLCheckpoint(ModelCheckpoint):
    """Checkpoint every ``every_n_epochs`` RL steps, keep the newest ``keep_last``.

    Configured in the ``checkpoint:`` section of an ``rlinf fit`` config (a ``ModelCheckpoint`` in
    ``trainer.callbacks`` replaces it; ``trainer.enable_checkpointing: false`` turns it off).

    Args:
        dirpath: directory of the checkpoints (default ``<log_dir>/checkpoints``).
        every_n_epochs: RL steps between checkpoints (0: none).
        keep_last: newest checkpoints kept on disk (-1: all).
        save_last: ``link``: ``last.ckpt`` is a symbolic link to the newest checkpoint (no second
            write); ``true``: a full copy; ``false``: no ``last.ckpt``.
        trainable_only: write only trainable parameters (plus buffers and optimizer state); frozen
            parameters are re-read from the policy's ``model_path`` on resume. ``auto``: when the
            policy has frozen parameters (LoRA) and the strategy checkpoints a full state dict
            (single device, DDP); FSDP2 and DeepSpeed always write everything.
        filename: checkpoint file name pattern (Lightning's ``ModelCheckpoint.filename``).
    """

    def __init__(
        self,
        dirpath: str | None = None,
        every_n_epochs: int = 1,
        keep_last: int = 1,
        save_last: bool | Literal["link"] = "link",
        trainable_only: bool | Literal["auto"] = "auto",
        filename: str | None = None,
    ) -> None:
        if every_n_epochs < 0:
            raise ValueError(f"checkpoint.every_n_epochs must be >= 0 (0: no checkpoints), got {every_n_epochs}")
        if keep_last == 0 or keep_last < -1:
            raise ValueError(f"checkpoint.keep_last must be >= 1 or -1 (keep all), got {keep_last}")
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor="step",  # "best" = newest: top-k by global step keeps the last k
            mode="max",
            save_top_k=keep_last,
            every_n_epochs=every_n_epochs,
            save_last=save_last,
            save_on_train_epoch_end=True,
        )
        self.keep_last = keep_last
        self.trainable_only = trainable_only

    @staticmethod
    def _link_checkpoint(trainer: pl.Trainer, filepath: str, linkpath: str) -> None:
        # a new link under a temporary name renamed over the old one: a kill never leaves no last.ckpt
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            tmp = f"{linkpath}.tmp-{os.getpid()}"
            if os.path.lexists(tmp):
                os.remove(tmp)
            try:
                os.symlink(os.path.relpath(filepath, os.path.dirname(linkpath)), tmp)
            except OSError:  # no symbolic links (Windows without the privilege): a copy, as Lightning does
                shutil.copy(filepath, tmp)
            os.replace(tmp, linkpath)
            fsync_dir(Path(linkpath).parent)
        trainer.strategy.barrier()

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        if self._wants_trainable_only(trainer, pl_module):
            drop_frozen(pl_module, checkpoint)

    def _wants_trainable_only(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        if self.trainable_only is False:
            return False
        full_state = isinstance(trainer.strategy, (SingleDeviceStrategy, DDPStrategy)) and not isinstance(
            trainer.strategy, DeepSpeedStrategy
        )
        supported = full_state and getattr(pl_module, "restores_frozen_weights", False)
        if self.trainable_only is True and not supported:
            raise ValueError(
                f"checkpoint.trainable_only: true needs an RLModule on a single device or DDP (got "
                f"{type(pl_module).__name__} on {type(trainer.strategy).__name__}); use auto or false"
            )
        return supported and bool(frozen_keys(pl_module))


def frozen_keys(module: torch.nn.Module) -> list[str]:
    """State-dict keys of the frozen parameters that come from ``model_path`` (every name of a tied parameter).

    Critic parameters (named ``value_head``, e.g. PEFT's frozen ``value_head.original_module`` copy) are
    initialised fresh, not read from ``model_path``, so they stay in the checkpoint.
    """
    state = module.state_dict(keep_vars=True)
    return [
        k
        for k, v in state.items()
        if isinstance(v, torch.nn.Parameter) and not v.requires_grad and "value_head" not in k
    ]


def _fingerprint(state: dict[str, torch.Tensor], keys: list[str]) -> torch.Tensor:
    """``float64 [len(keys)]``: the sum of each tensor (cheap, catches a different base model)."""
    return torch.stack([state[k].detach().double().sum().cpu() for k in keys]) if keys else torch.zeros(0)


def drop_frozen(module: torch.nn.Module, checkpoint: dict[str, Any]) -> None:
    """Remove the frozen parameters from ``checkpoint["state_dict"]``; record their names and fingerprint."""
    keys = [k for k in frozen_keys(module) if k in checkpoint["state_dict"]]
    fingerprint = _fingerprint(checkpoint["state_dict"], keys)
    for k in keys:
        del checkpoint["state_dict"][k]
    checkpoint[FROZEN_KEY] = {"keys": keys, "fingerprint": fingerprint}


def restore_frozen(module: torch.nn.Module, checkpoint: dict[str, Any]) -> None:
    """Put the frozen parameters a trainable-only checkpoint left out back in, from ``module``'s own.

    Raises ``ValueError`` (one line) when ``module``'s frozen weights are not those of the run that saved it.
    """
    info = checkpoint.get(FROZEN_KEY)
    if not info or not info["keys"]:
        return
    own = module.state_dict()
    missing = [k for k in info["keys"] if k not in own]
    if missing:
        raise ValueError(
            f"the checkpoint left out {len(info['keys'])} frozen parameters that this model does not have "
            f"(e.g. {missing[0]!r}): resume with the policy config of the run that saved it"
        )
    mine = _fingerprint(own, info["keys"])
    bad = ~torch.isclose(mine, info["fingerprint"].double(), rtol=1e-5, atol=1e-6)
    if bad.any():
        first = info["keys"][int(bad.nonzero()[0])]
        raise ValueError(
            f"frozen weights differ from the run that saved this checkpoint (e.g. {first!r}; it stores "
            "trainable weights only): build the policy from the same model_path as that run"
        )
    state = checkpoint["state_dict"]
    for k in info["keys"]:
        state[k] = own[k]
