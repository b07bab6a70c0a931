"""What rlinf's supervised modules share: SFT of a policy, world-model and reward-model training.

Each trains one module (:meth:`SupervisedModule.trained_module`) with AdamW + the ``optim`` schedule,
clips the gradient norm at ``optim.clip_grad`` and, at the end of fit, writes that module with its
``save_pretrained`` to ``export_dir`` (default ``<log_dir>/<export_name>``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from rlinf_core.foundation.trainer import attached_trainer
from rlinf_core.rl.optim import configure_adamw

__all__ = ["SupervisedModule"]


class SupervisedModule(pl.LightningModule):
    """Base of the supervised modules. Subclasses set ``optim_cfg``, ``batch_size``, ``num_workers``,
    ``split_seed``, ``export_dir`` and ``export_path`` in ``__init__`` and implement :meth:`trained_module`."""

    #: sub-directory of the run's log dir the module is exported to when ``export_dir`` is not set
    export_name = "model"
    #: appended to the "saved to" line printed at the end of fit
    export_hint = ""

    def trained_module(self) -> nn.Module:
        raise NotImplementedError

    @staticmethod
    def check_data_settings(val_fraction: float, batch_size: int) -> None:
        """One-line errors for a held-out fraction outside ``[0, 1)`` or a batch size below 1."""
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    def _loader(self, dataset: Dataset, train: bool, collate_fn: Callable) -> DataLoader:
        """Batches of ``dataset``; under DDP each rank reads its own shard (shuffled per epoch when ``train``)."""
        trainer = attached_trainer(self)
        world = trainer.world_size if trainer is not None else 1
        sampler = None
        if world > 1:
            sampler = DistributedSampler(dataset, world, self.global_rank, shuffle=train, seed=self.split_seed)
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=train and sampler is None,
            sampler=sampler,
            num_workers=self.num_workers,
            collate_fn=collate_fn,
            drop_last=train and len(dataset) > self.batch_size * world,
            persistent_workers=self.num_workers > 0,
        )

    def configure_optimizers(self):
        params = [p for p in self.trained_module().parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"{type(self.trained_module()).__name__} has no trainable parameters")
        return configure_adamw(self.optim_cfg, params, total_steps=int(self.trainer.estimated_stepping_batches))

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        clip = self.optim_cfg.clip_grad if gradient_clip_val is None else gradient_clip_val
        if clip is not None:
            algorithm = gradient_clip_algorithm or "norm"
            self.clip_gradients(optimizer, gradient_clip_val=clip, gradient_clip_algorithm=algorithm)

    def on_fit_end(self) -> None:
        log_dir = self.trainer.log_dir  # a broadcast under DDP: every rank must call it
        if self.global_rank != 0:
            return
        if self.export_dir is not None:
            path = Path(self.export_dir)
        elif log_dir is not None:
            path = Path(log_dir) / self.export_name
        else:
            return
        module = self.trained_module()
        was_training = module.training
        module.eval()
        written = module.save_pretrained(str(path))
        module.train(was_training)
        self.export_path = Path(written) if isinstance(written, (str, Path)) else path
        print(f"rlinf: {type(module).__name__} saved to {self.export_path}{self.export_hint}", file=sys.stderr)
