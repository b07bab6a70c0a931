"""A callback the multi-process tests add to ``rlinf fit``: each rank writes what it saw to JSON."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import lightning.pytorch as pl
import torch


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def params_digest(module: torch.nn.Module) -> str:
    """sha1 of every parameter's full value (sharded parameters are gathered: call on all ranks)."""
    h = hashlib.sha1()
    for name, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(_full(p.detach()).float().cpu().numpy().tobytes())
    return h.hexdigest()


class ScaleProbe(pl.Callback):
    """Records per rank: shard pools, rollout reset ids, gathered metrics, parameter digests.

    Args:
        out_dir: directory for ``rank<k>.json``.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.record: dict = {"epochs": []}

    def on_fit_start(self, trainer, pl_module) -> None:
        self.record["rank"] = trainer.global_rank
        self.record["world_size"] = trainer.world_size
        self.record["strategy"] = type(trainer.strategy).__name__
        self.record["digest_start"] = params_digest(pl_module.policy)
        self.record["sharded_params"] = any(hasattr(p, "full_tensor") for p in pl_module.policy.parameters())
        self.record["model_type"] = type(trainer.strategy.model).__name__
        self.record["rng_digest"] = hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx != 0:
            return
        envs = pl_module._stage_envs
        self.record["epochs"].append({
            "pools": [env.pool.tolist() for env in envs],
            "reset_state_ids": [env.reset_state_ids.tolist() for env in envs],
            "group_size": pl_module.env.group_size,
            "num_samples": len(pl_module.samples),
            "worker_pids": [env._workers.pids if env.num_workers else [] for env in envs],
        })

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if torch.is_tensor(v) and v.numel() == 1}
        self.record["epochs"][-1]["metrics"] = metrics

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.record["eval"] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("eval/")}
        self.record["eval_per_task"] = pl_module.last_eval.get("per_task", {})

    def on_fit_end(self, trainer, pl_module) -> None:
        self.record["digest_end"] = params_digest(pl_module.policy)
        self.record["log_dir"] = trainer.log_dir
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record, indent=1))
