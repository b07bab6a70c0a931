"""A callback for the 2-rank DDP test: counts gradient all-reduces per optimizer step (a DDP comm hook)
and compares the synced gradient with the full-minibatch gradient averaged over ranks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook


class GradSyncProbe(pl.Callback):
    """Writes ``gradsync_rank<k>.json``: per optimizer step the bucket all-reduces and the gradient error.

    Args:
        out_dir: output directory.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.buckets: list[int] = []  # bucket indices all-reduced since the last optimizer step
        self.calls: list[int] = []  # the micro-batch (batch_idx) of each bucket all-reduce since the last step
        self.steps: list[dict] = []
        self.batch_idx = -1

    def on_fit_start(self, trainer, pl_module) -> None:
        def counting_hook(state, bucket):
            self.buckets.append(bucket.index())
            self.calls.append(self.batch_idx)
            return allreduce_hook(state, bucket)

        trainer.strategy.model.register_comm_hook(None, counting_hook)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch_idx = batch_idx

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        buffer = pl_module.buffer
        first = self.batch_idx
        while first > 0 and not buffer.micro_batch(pl_module.current_epoch, first - 1).last:
            first -= 1
        items = [buffer.micro_batch(pl_module.current_epoch, i) for i in range(first, self.batch_idx + 1)]
        idx = torch.cat([it.idx for it in items])
        mb = buffer.samples.select(idx)
        policy = pl_module.policy
        params = [p for p in policy.parameters() if p.requires_grad]
        out = policy.evaluate(
            mb.obs,
            dict(mb.records),
            temperature=pl_module.rollout_cfg.temperature_train,
            compute_entropy=True,
            compute_values=pl_module.algorithm.uses_critic,
        )
        loss, _ = pl_module.algorithm.loss(out, dataclasses.replace(items[-1], samples=mb, idx=idx))
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        want = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])
        dist.all_reduce(want)
        want /= dist.get_world_size()
        got = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
        self.steps.append(
            {
                "micro_batches": len(items),
                "bucket_allreduces": len(self.buckets),
                "distinct_buckets": len(set(self.buckets)),
                "grad_max_abs_err": float((got - want).abs().max()),
                "grad_max_abs": float(want.abs().max()),
                "allreduce_batch_idx": self.calls,
                "batch_idx": [first, self.batch_idx],
            }
        )
        self.buckets, self.calls = [], []

    def on_fit_end(self, trainer, pl_module) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"gradsync_rank{trainer.global_rank}.json").write_text(json.dumps(self.steps, indent=1))
