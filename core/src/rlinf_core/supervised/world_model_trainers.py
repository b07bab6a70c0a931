"""Fine-tuning a world model and training its success classifier on recorded episodes, through ``rlinf fit``.

Both modules read directories of ``traj*.npy`` episodes (written by :class:`rlinf_core.callbacks.recorder.
RolloutRecorder`, see :mod:`rlinf_core.world_models.datasets`), hold out ``val_fraction`` of the episodes for
``val/*`` metrics, and export at the end of fit what the env loads unchanged:

- :class:`WorldModelTrainer` minimises ``world_model.training_loss(frames, actions)`` on clips of
  ``world_model.clip_frames`` frames and writes ``world_model.save_pretrained(export_dir)``;
- :class:`RewardModelTrainer` minimises the frame-level BCE of ``reward_model.success_logits`` (labels:
  positive at and after an episode's first success) and writes ``reward_model.save_pretrained(export_dir)``
  (``resnet_rm.pth`` / ``taskemb_resnet_rm.pth``).

The data lives in the module (as in :class:`rlinf_core.supervised.sft.SFTModule`): the ``rlinf`` CLI has no separate
``data:`` section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from rlinf_core.contracts.world_model import RewardModel, WorldModel
from rlinf_core.rl.config import OptimConfig
from rlinf_core.supervised.base import SupervisedModule
from rlinf_core.world_models.datasets import ClipDataset, FrameDataset, find_trajectories, split_episodes

__all__ = ["RewardModelTrainer", "WorldModelTrainer"]


class _EpisodeTrainer(SupervisedModule):
    """Shared parts: the episode split and the loaders (optimizer, clipping and export: :class:`SupervisedModule`)."""

    export_name = "model"

    def __init__(
        self,
        data_path: str,
        batch_size: int,
        optim: OptimConfig,
        val_fraction: float,
        num_workers: int,
        split_seed: int,
        image_size: int | None,
        export_dir: str | None,
        cache_dir: str | None,
    ) -> None:
        super().__init__()
        self.check_data_settings(val_fraction, batch_size)
        if image_size is not None and image_size < 1:
            raise ValueError(f"image_size must be >= 1 (or null: as recorded), got {image_size}")
        find_trajectories(data_path)  # a missing / empty data directory fails before a run directory is made
        self.data_path = data_path
        self.batch_size = batch_size
        self.optim_cfg = optim
        self.val_fraction = val_fraction
        self.num_workers = num_workers
        self.split_seed = split_seed
        self.image_size = image_size
        self.export_dir = export_dir
        self.cache_dir = cache_dir
        self.export_path: Path | None = None
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None

    def trained_module(self) -> torch.nn.Module:
        raise NotImplementedError

    def _dataset(self, episodes: list[int]) -> Dataset:
        raise NotImplementedError

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        train, val = split_episodes(len(find_trajectories(self.data_path)), self.val_fraction, self.split_seed)
        self.train_set = self._dataset(train)
        self.val_set = self._dataset(val) if val else None
        if len(self.train_set) == 0:
            raise ValueError(f"{self.data_path}: no training samples in {len(train)} episodes (episodes too short?)")

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, True, type(self.train_set).collate)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(self.val_set, False, type(self.val_set).collate) if self.val_set is not None else []


class WorldModelTrainer(_EpisodeTrainer):
    """Fine-tunes a world model on recorded episodes with its own ``training_loss``.

    Logs ``train/loss`` and ``val/loss`` (validation noise from a fixed generator per batch, so epochs compare).

    Args:
        world_model: the model to fine-tune (implements ``training_loss`` and ``save_pretrained``; its
            ``clip_frames`` and ``condition`` decide the clips).
        data_path: directory (searched recursively) of ``traj*.npy`` episodes.
        batch_size: clips per optimizer step, per device.
        optim: AdamW and schedule (``value_lr`` / ``critic_warmup_steps`` do not apply).
        val_fraction: fraction of episodes held out for ``val/loss`` (0: none).
        num_workers: DataLoader worker processes.
        split_seed: seed of the train / val episode split (and of the distributed sampler).
        image_size: resize frames to this square size (``null``: as recorded).
        stride: frames between window starts.
        export_dir: where the model is saved at the end of fit (default ``<log_dir>/world_model``); point the
            env's ``world_model`` at it.
        cache_dir: keep a memory-mapped copy of every episode here (random windows then read one window, not a
            whole episode file: use it beyond toy datasets); ``null``: decode the episode files on demand.
    """

    export_name = "world_model"

    def __init__(
        self,
        world_model: WorldModel,
        data_path: str,
        batch_size: int = 8,
        optim: OptimConfig = OptimConfig(lr=1e-5),
        val_fraction: float = 0.1,
        num_workers: int = 0,
        split_seed: int = 0,
        image_size: int | None = None,
        stride: int = 1,
        export_dir: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__(
            data_path, batch_size, optim, val_fraction, num_workers, split_seed, image_size, export_dir, cache_dir
        )
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")
        self.world_model = world_model
        self.stride = stride

    def trained_module(self) -> torch.nn.Module:
        return self.world_model

    def _dataset(self, episodes: list[int]) -> ClipDataset:
        wm = self.world_model
        Nc, Nt = wm.clip_frames
        return ClipDataset(
            self.data_path,
            Nc,
            Nt,
            stride=self.stride,
            anchor_first_frame=wm.condition.frames == "first_and_last",
            pad_gripper=wm.condition.pad_gripper,
            image_size=self.image_size,
            episodes=episodes,
            cache_dir=self.cache_dir,
        )

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.train_set.action_dim != self.world_model.action_dim:
            raise ValueError(
                f"episodes in {self.data_path} have {self.train_set.action_dim}-D actions but "
                f"{type(self.world_model).__name__} takes {self.world_model.action_dim}-D actions"
            )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        frames, actions = batch
        loss = self.world_model.training_loss(frames, actions)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(frames), sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        frames, actions = batch
        gen = torch.Generator(device=frames.device).manual_seed(self.split_seed * 100_003 + batch_idx)
        loss = self.world_model.training_loss(frames, actions, generator=gen)
        self.log("val/loss", loss, batch_size=len(frames), sync_dist=True, prog_bar=True)


class RewardModelTrainer(_EpisodeTrainer):
    """Trains a success classifier on the frames of recorded episodes (frame-level BCE).

    Logs ``train/loss``, ``val/loss``, ``val/accuracy`` (p > 0.5 against the label) and ``val/positive_recall``.

    Args:
        reward_model: the classifier (implements ``success_logits`` and ``save_pretrained``, e.g.
            ``ResnetRewardModel`` / ``TaskEmbedResnetRewardModel``).
        data_path: directory (searched recursively) of ``traj*.npy`` episodes with per-frame ``success``.
        batch_size: frames per optimizer step, per device.
        optim: AdamW and schedule (``value_lr`` / ``critic_warmup_steps`` do not apply).
        val_fraction: fraction of episodes held out for the ``val/*`` metrics (0: none).
        num_workers: DataLoader worker processes.
        split_seed: seed of the train / val episode split.
        image_size: resize frames to this square size (``null``: as recorded; the world model's frame size
            is what the classifier will see in the env).
        pos_weight: weight of positive frames in the BCE (``null``: 1; success frames are usually rare).
        export_dir: where the checkpoint is written at the end of fit (default ``<log_dir>/reward_model``, file
            ``resnet_rm.pth`` or ``taskemb_resnet_rm.pth``).
        cache_dir: keep a memory-mapped copy of every episode here (see ``WorldModelTrainer``).
    """

    export_name = "reward_model"

    def __init__(
        self,
        reward_model: RewardModel,
        data_path: str,
        batch_size: int = 64,
        optim: OptimConfig = OptimConfig(lr=1e-4),
        val_fraction: float = 0.1,
        num_workers: int = 0,
        split_seed: int = 0,
        image_size: int | None = None,
        pos_weight: float | None = None,
        export_dir: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__(
            data_path, batch_size, optim, val_fraction, num_workers, split_seed, image_size, export_dir, cache_dir
        )
        if pos_weight is not None and pos_weight <= 0:
            raise ValueError(f"pos_weight must be > 0 (or null), got {pos_weight}")
        self.reward_model = reward_model
        self.pos_weight = pos_weight

    def trained_module(self) -> torch.nn.Module:
        return self.reward_model

    def _dataset(self, episodes: list[int]) -> FrameDataset:
        return FrameDataset(self.data_path, image_size=self.image_size, episodes=episodes, cache_dir=self.cache_dir)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        task_ids = getattr(self.reward_model, "task_ids", None)
        if callable(task_ids):  # a task-conditioned model: every recorded instruction must be one of its tasks
            texts = sorted(set().union(*(d.instructions for d in (self.train_set, self.val_set) if d is not None)))
            task_ids(texts, len(texts))

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor, list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        frames, labels, texts = batch
        logits = self.reward_model.success_logits(frames, texts).float()
        weight = None if self.pos_weight is None else torch.tensor(self.pos_weight, device=logits.device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.device), pos_weight=weight)
        return loss, logits

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, _ = self._loss(batch)
        n = len(batch[1])
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, logits = self._loss(batch)
        labels = batch[1].to(logits.device)
        hit = (logits > 0).float()
        n = len(labels)
        self.log("val/loss", loss, batch_size=n, sync_dist=True, prog_bar=True)
        self.log("val/accuracy", (hit == labels).float().mean(), batch_size=n, sync_dist=True, prog_bar=True)
        self._val_counts += torch.stack([(hit * labels).sum(), labels.sum()]).double().cpu()

    def on_validation_epoch_start(self) -> None:
        self._val_counts = torch.zeros(2, dtype=torch.float64)

    def on_validation_epoch_end(self) -> None:
        # recall over the whole validation set (a batch may hold no positive frame)
        hits, positives = self.trainer.strategy.reduce(self._val_counts.to(self.device), reduce_op="sum").tolist()
        if positives > 0:
            self.log("val/positive_recall", hits / positives, sync_dist=False)
