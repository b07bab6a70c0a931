"""Supervised fine-tuning (behaviour cloning) of a policy on a demo dataset.

The SFT → RL flow of RLinf's guides: ``rlinf fit --config sft.yaml`` writes the policy in Hugging
Face layout (``<log_dir>/policy`` or ``export_dir``), and the RL config starts from it through
the policy's ``model_path``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.policy import Policy
from rlinf_core.datasets.demos import DemoDataset
from rlinf_core.lerobot.demos import LeRobotDemos
from rlinf_core.rl.config import OptimConfig
from rlinf_core.supervised.base import SupervisedModule


class SFTModule(SupervisedModule):
    """Behaviour cloning: minimises ``policy.sft_loss(obs, expert_action_chunks)``.

    Args:
        policy: the policy to train (any :class:`rlinf_core.Policy` implementing ``sft_loss``).
        data_path: an ``rlinf-demos`` dataset directory (see :mod:`rlinf_core.datasets.demos`); action
            chunks are cut to the policy's ``num_action_chunks``.
        batch_size: samples (observation + action chunk) per optimizer step, per device.
        optim: optimizer and schedule settings (the RL module's; ``value_lr`` and ``critic_warmup_steps``
            do not apply; ``clip_grad`` clips the gradient norm when set).
        val_fraction: fraction of episodes held out for ``val/loss`` (0: no validation).
        num_workers: DataLoader worker processes.
        only_success: train only on episodes that reached success.
        split_seed: seed of the train/val episode split.
        data: a LeRobot dataset instead of ``data_path`` (``{class_path: LeRobotDemos, init_args: {root, preset,
            camera_keys, state_key, action_key, ...}}``, see :mod:`rlinf_core.lerobot.demos`); a ``data_path``
            holding ``meta/info.json`` is read as ``LeRobotDemos(data_path)`` with the preset that fits.
        export_dir: where the trained policy is saved (``save_pretrained``) at the end of fit;
            default ``<log_dir>/policy``. Point the RL config's ``policy.init_args.model_path`` here.
    """

    export_name = "policy"
    export_hint = " (use it as the policy's model_path)"

    def __init__(
        self,
        policy: Policy,
        data_path: str | None = None,
        batch_size: int = 32,
        optim: OptimConfig = OptimConfig(clip_grad=None),
        val_fraction: float = 0.1,
        num_workers: int = 0,
        only_success: bool = True,
        split_seed: int = 0,
        export_dir: str | None = None,
        data: LeRobotDemos | None = None,
    ) -> None:
        super().__init__()
        self.check_data_settings(val_fraction, batch_size)
        if (data_path is None) == (data is None):
            raise ValueError("give the SFT data as exactly one of data_path (a demo directory) and data (LeRobotDemos)")
        self.data = data
        if optim.lr_scheduler not in ("constant", "cosine", "linear"):
            raise ValueError(f"optim.lr_scheduler must be 'constant', 'cosine' or 'linear', got {optim.lr_scheduler!r}")
        self.policy = policy
        self.data_path = data_path
        self.batch_size = batch_size
        self.optim_cfg = optim
        self.val_fraction = val_fraction
        self.num_workers = num_workers
        self.only_success = only_success
        self.split_seed = split_seed
        self.export_dir = export_dir
        self.export_path: Path | None = None
        self.train_set: DemoDataset | None = None
        self.val_set: DemoDataset | None = None

    # ------------------------------------------------------------------ data
    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        chunks = self.policy.num_action_chunks
        source = self.data
        if source is None and (Path(self.data_path) / "meta" / "info.json").is_file():
            source = LeRobotDemos(self.data_path)
        if source is not None:
            data = source.load(num_action_chunks=chunks, only_success=self.only_success)
        else:
            data = DemoDataset(self.data_path, num_action_chunks=chunks, only_success=self.only_success)
        if data.action_dim != self.policy.action_dim:
            raise ValueError(
                f"demo dataset {self.data_path or self.data.root} has action_dim {data.action_dim} but the policy "
                f"{type(self.policy).__name__} has action_dim {self.policy.action_dim}"
            )
        self.train_set, self.val_set = data.split(self.val_fraction, seed=self.split_seed)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, True, DemoDataset.collate)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(self.val_set, False, DemoDataset.collate) if self.val_set is not None else []

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        obs, actions = batch
        return obs.to(device), actions.to(device)

    # ------------------------------------------------------------------ steps
    def training_step(self, batch: tuple[Observation, torch.Tensor], batch_idx: int) -> torch.Tensor:
        obs, actions = batch
        loss = self.policy.sft_loss(obs, actions)
        self.log(
            "train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(actions), sync_dist=True
        )
        return loss

    def validation_step(self, batch: tuple[Observation, torch.Tensor], batch_idx: int) -> None:
        obs, actions = batch
        n = len(actions)
        self.log("val/loss", self.policy.sft_loss(obs, actions), batch_size=n, sync_dist=True, prog_bar=True)
        pred = self.policy.act(obs, do_sample=False).actions.to(actions.device)
        self.log("val/action_l1", (pred - actions).abs().mean(), batch_size=n, sync_dist=True)

    def trained_module(self) -> torch.nn.Module:
        return self.policy
