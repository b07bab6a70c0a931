"""The RL loop as a LightningModule.

One Lightning epoch is one RL step: ``on_train_epoch_start`` collects ``rollout_epoch`` rollouts
with the current policy (no grad, eval mode), computes advantages, and builds a fresh shuffle of
the samples; then every ``training_step`` processes one micro-batch, and an optimizer step is
taken at the end of each minibatch (gradient accumulation). Multi-GPU / multi-node training comes
from Lightning's strategies: every rank runs its own envs on its own share of initial states.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

from rlinf.algorithms.base import Algorithm, Reducer
from rlinf.checkpoint_io import install_atomic_io
from rlinf.checkpointing import restore_frozen
from rlinf.config import OptimConfig, RolloutConfig
from rlinf.envs.base import Env
from rlinf.policies.base import Policy
from rlinf.resume import RESUME_KEY, gather_rank_states, layout_mismatch, rng_state, set_rng_state
from rlinf.rollout.collector import RolloutCollector
from rlinf.rollout.trajectory import Samples
from rlinf.strategies import (
    backward_sync,
    deepspeed_engine,
    deepspeed_step,
    export_policy,
    rollout_mode,
    set_accumulation_boundary,
    shard_policy,
)
from rlinf.validation import first_non_finite

EPISODE_KEYS = ("success_once", "success_at_end", "return", "episode_len", "reward")
MINIBATCH_NORMALISED = {"train/actor/policy_loss", "train/entropy_loss", "train/critic/value_loss", "train/loss"}


class _Counter(IterableDataset):
    """Yields 0..n-1; ``n`` is re-read every epoch."""

    def __init__(self, module: RLModule) -> None:
        self.module = module

    def __iter__(self):
        return iter(range(self.module.steps_per_epoch))


class _DistReducer(Reducer):
    def sum(self, x: torch.Tensor) -> torch.Tensor:
        if not (dist.is_available() and dist.is_initialized()):
            return x
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y

    def max(self, x: torch.Tensor) -> torch.Tensor:
        if not (dist.is_available() and dist.is_initialized()):
            return x
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        return y


class RLModule(pl.LightningModule):
    """Fine-tunes a policy with PPO or GRPO in an env.

    Args:
        env: training env (per rank; split into ``rollout.pipeline_stage_num`` stages).
        policy: the policy to train.
        algorithm: ``PPO`` or ``GRPO`` (and their settings).
        eval_env: env for evaluation; default: ``env`` cloned in eval mode (``is_eval: true,
            auto_reset: true, group_size: 1``).
        rollout: rollout settings.
        optim: optimizer and schedule settings.
        global_batch_size: samples (chunk steps of one env) per optimizer step, over all ranks.
        micro_batch_size: samples per forward/backward pass (gradient accumulation up to the
            global batch).
        export_policy: save the trained policy in Hugging Face layout under
            ``<log_dir>/policy`` at the end of fit.
        offload_optimizer: move the optimizer state to CPU during rollouts and evals (frees
            accelerator memory for inference and simulators; no effect on CPU or with DeepSpeed,
            which has its own ``offload_optimizer``).
    """

    restores_frozen_weights = True  # RLCheckpoint may leave frozen parameters out (see rlinf.checkpointing)

    def __init__(
        self,
        env: Env,
        policy: Policy,
        algorithm: Algorithm,
        eval_env: Env | None = None,
        rollout: RolloutConfig = RolloutConfig(),
        optim: OptimConfig = OptimConfig(),
        global_batch_size: int = 256,
        micro_batch_size: int = 32,
        export_policy: bool = True,
        offload_optimizer: bool = False,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.env = env
        self.eval_env = eval_env
        self.policy = policy
        self.algorithm = algorithm
        self.rollout_cfg = rollout
        self.optim_cfg = optim
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.export_policy = export_policy
        self.offload_optimizer = offload_optimizer
        self._validate()
        self.steps_per_epoch = 0
        self.collector: RolloutCollector | None = None
        self.samples: Samples | None = None
        self.schedule: list[dict[str, Any]] = []
        self.reducer = _DistReducer()
        self.last_eval: dict[str, Any] = {}
        self.skipped_steps = 0
        self._train_sums: dict[str, tuple[torch.Tensor | float, float]] = {}
        self._last_values: dict[str, float] = {}
        self._optim_steps_done = 0
        self._epoch_t0 = 0.0
        self._stage_envs: list[Env] = []

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        C = self.policy.num_action_chunks
        ro = self.rollout_cfg
        if self.env.action_dim != self.policy.action_dim:
            raise ValueError(
                f"env {type(self.env).__name__} has action_dim {self.env.action_dim} but policy "
                f"{type(self.policy).__name__} outputs {self.policy.action_dim}"
            )
        if ro.max_steps_per_rollout_epoch % C:
            raise ValueError(
                f"rollout.max_steps_per_rollout_epoch ({ro.max_steps_per_rollout_epoch}) must be a multiple "
                f"of the policy's num_action_chunks ({C})"
            )
        S = ro.pipeline_stage_num
        if S < 1 or self.env.num_envs % S or (self.env.num_envs // S) % self.env.group_size:
            raise ValueError(
                f"env.num_envs ({self.env.num_envs}) must split into pipeline_stage_num ({S}) stages that are "
                f"each a multiple of group_size ({self.env.group_size})"
            )
        if type(self.algorithm).__name__ == "GRPO":
            if self.env.group_size < 2:
                raise ValueError("GRPO needs env.group_size > 1: each group shares one initial state")
            if self.env.auto_reset:
                raise ValueError("GRPO scores whole episodes: set env auto_reset: false")
        if self.algorithm.uses_critic and not self.policy.has_value_head:
            raise ValueError(f"{type(self.algorithm).__name__} needs a critic: set the policy's add_value_head: true")
        if self.micro_batch_size < 1 or self.global_batch_size < 1:
            raise ValueError("global_batch_size and micro_batch_size must be >= 1")

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        if self._trainer is not None:
            install_atomic_io(self.trainer)  # atomic checkpoint writes, verified weights_only reads
        rank, world = self.global_rank, self.trainer.world_size if self._trainer is not None else 1
        if not self.algorithm.uses_critic:
            for p in self.policy.value_parameters():  # unused without a critic: DDP would wait for their grads
                p.requires_grad_(False)
        if stage == "fit" and rank > 0:
            # seed_everything gives every rank the same RNG stream: without this, all ranks would
            # draw the same sampling noise for their actions (parameters are synced from rank 0 anyway)
            torch.manual_seed(torch.initial_seed() + 7919 * rank)
        if stage == "fit" and not self._stage_envs:
            S = self.rollout_cfg.pipeline_stage_num
            if S == 1:
                self._stage_envs = [self.env]
            else:
                n = self.env.num_envs // S
                self._stage_envs = [self.env.clone(num_envs=n, seed=self.env.seed + 1000 * s) for s in range(S)]
            for s, env in enumerate(self._stage_envs):
                env.shard(rank * S + s, world * S)
            self.collector = RolloutCollector(self._stage_envs, self.policy, self.algorithm.uses_critic)
            self.steps_per_epoch = self._count_training_steps(world)
        if self.eval_env is None:
            self.eval_env = self.env.clone(is_eval=True, auto_reset=True, group_size=1)
        self.eval_env.shard(rank, world)

    def _samples_per_rank(self) -> int:
        ro = self.rollout_cfg
        n_chunks = ro.max_steps_per_rollout_epoch // self.policy.num_action_chunks
        return ro.rollout_epoch * n_chunks * self.env.num_envs

    def _minibatch_sizes(self, world: int) -> list[int]:
        per_rank = max(1, self.global_batch_size // world)
        total = self._samples_per_rank()
        per_rank = min(per_rank, total)
        sizes = [per_rank] * (total // per_rank)
        if total % per_rank:
            sizes.append(total % per_rank)
        return sizes

    def _count_training_steps(self, world: int) -> int:
        micro = self.micro_batch_size
        per_epoch = sum(math.ceil(m / micro) for m in self._minibatch_sizes(world))
        return per_epoch * self.algorithm.update_epoch

    @property
    def optimizer_steps_per_epoch(self) -> int:
        return len(self._minibatch_sizes(self.trainer.world_size)) * self.algorithm.update_epoch

    def configure_model(self) -> None:
        shard_policy(self)  # FSDP2 (ModelParallelStrategy) only

    def configure_callbacks(self):
        envs = [self.env, self.eval_env]
        if any(e is not None and e.video_cfg.save_video for e in envs):
            from rlinf.callbacks.video import RolloutVideoRecorder

            return [RolloutVideoRecorder()]
        return []

    def train_dataloader(self):
        # own generators: a DataLoader iterator otherwise draws from the global RNG (its shared seed) at a point
        # Lightning's loop order decides, which a resume from a checkpoint could not reproduce
        return DataLoader(_Counter(self), batch_size=None, generator=torch.Generator())

    def val_dataloader(self):
        return DataLoader(range(1), batch_size=None, generator=torch.Generator())

    # ------------------------------------------------------------------ optimizers
    def configure_optimizers(self):
        cfg = self.optim_cfg
        value_ids = {id(p) for p in self.policy.value_parameters()}
        params = [p for p in self.policy.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if id(p) not in value_ids], "lr": cfg.lr, "name": "actor"}]
        value_params = [p for p in params if id(p) in value_ids]
        if value_params:
            groups.append({"params": value_params, "lr": cfg.value_lr or cfg.lr, "name": "critic"})
        opt = torch.optim.AdamW(
            groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay
        )
        max_epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        total = max(1, max_epochs * self.optimizer_steps_per_epoch)
        # the actor's schedule (warm-up, decay) starts when the actor starts training, after the critic
        # warm-up (RLinf rebuilds the optimizer there); the critic's runs from step 0
        start = max(0, cfg.critic_warmup_steps)
        lambdas = [_lr_lambda(cfg, max(1, total - start), start=start)]
        if value_params:
            lambdas.append(_lr_lambda(cfg, total))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambdas)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ rollout
    def on_train_epoch_start(self) -> None:
        self._epoch_t0 = time.perf_counter()
        ro = self.rollout_cfg
        n_chunks = ro.max_steps_per_rollout_epoch // self.policy.num_action_chunks
        self.policy.eval()
        t0 = time.perf_counter()
        with rollout_mode(self, self.offload_optimizer):
            trajs = self._collect_rollouts(ro, n_chunks)
        rollout_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        samples, metrics = self.algorithm.compute(trajs, self.env.group_size, self.reducer)
        metrics["time/advantages"] = time.perf_counter() - t1
        metrics["time/rollout"] = rollout_time
        metrics.update({k: v for k, v in self.collector.times.as_metrics().items() if k != "time/rollout"})
        if ro.recompute_logprobs:
            self.policy.train()  # recompute in the mode the update runs in (dropout etc.)
            with self.trainer.precision_plugin.forward_context():
                metrics["rollout/logprob_mismatch"] = self._recompute_old_logprobs(samples)
        metrics.update(self._episode_metrics([e for env in self._stage_envs for e in env.pop_episodes()], "env"))
        metrics.update(self._env_counters())
        self.samples = samples
        self.schedule = self._build_schedule(len(samples))
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.log(key, float(value), on_step=False, on_epoch=True, batch_size=1)
        self.policy.train()

    def _collect_rollouts(self, ro: RolloutConfig, n_chunks: int) -> list:
        trajs = []
        for r in range(ro.rollout_epoch):
            reset = not self.env.auto_reset or self.collector.last_obs[0] is None
            progress = self._progress(f"rollout {self.current_epoch} [{r + 1}/{ro.rollout_epoch}]")
            # same precision context as training_step, so rollout and update log-probs agree
            with self.trainer.precision_plugin.forward_context():
                traj = self.collector.collect(n_chunks, ro.do_sample, ro.temperature_train, reset=reset, progress=progress)
            trajs.append(traj)
            if not self.env.auto_reset:
                for env in self._stage_envs:
                    env.flush_episodes()
        return trajs

    def _env_counters(self) -> dict[str, float]:
        """Env-level counters (worker restarts, dropped episodes), summed over stages and ranks."""
        counts: dict[str, float] = defaultdict(float)
        for env in self._stage_envs:
            for key, value in env.pop_metrics().items():
                counts[key] += value
        if not counts:
            return {}
        keys = sorted(counts)
        total = self.reducer.sum(torch.tensor([counts[k] for k in keys], dtype=torch.float64))
        return {k: float(v) for k, v in zip(keys, total)}

    def _progress(self, label: str):
        """A ``(done, total)`` callback printing progress on rank 0 (at most once a second)."""
        if not self.rollout_cfg.show_progress or self.global_rank != 0:
            return None
        state = {"last": 0.0, "t0": time.perf_counter()}

        def show(done: int, total: int, unit: str = "chunk steps") -> None:
            now = time.perf_counter()
            final = total > 0 and done >= total
            if final or now - state["last"] > 1.0:
                state["last"] = now
                of = f"/{total}" if total > 0 else ""
                end = "\n" if final else "\r"
                print(f"{label}: {done}{of} {unit} ({now - state['t0']:.1f}s)", end=end, file=sys.stderr, flush=True)

        return show

    @torch.no_grad()
    def _recompute_old_logprobs(self, samples: Samples) -> float:
        worst = 0.0
        for start in range(0, len(samples), self.micro_batch_size):
            idx = torch.arange(start, min(start + self.micro_batch_size, len(samples)))
            mb = samples.select(idx)
            out = self.policy.evaluate(
                mb.obs.to(self.device), {k: v.to(self.device) for k, v in mb.records.items()},
                temperature=self.rollout_cfg.temperature_train,
            )
            new = out.logprobs.float().cpu()
            worst = max(worst, float((new - mb.old_logprobs).abs().max()))
            samples.old_logprobs[idx] = new
        return float(self.reducer.max(torch.tensor(worst, dtype=torch.float64)))

    def _build_schedule(self, n: int) -> list[dict[str, Any]]:
        """Micro-batch index lists for every update epoch, freshly shuffled per RL step and pass."""
        seed = (self.trainer.world_size * 100_003 * (self.current_epoch + 1) + self.global_rank) * 7 + 12345
        gen = torch.Generator().manual_seed(seed)
        schedule = []
        mask = self.samples.mask
        for _ in range(self.algorithm.update_epoch):
            perm = torch.randperm(n, generator=gen)
            start = 0
            for size in self._minibatch_sizes(self.trainer.world_size):
                mb_idx = perm[start : start + size]
                start += size
                denom = float(self.reducer.sum(mask[mb_idx].sum().double()))
                vdenom = None
                if self.samples.value_mask is not None:
                    vdenom = float(self.reducer.sum(self.samples.value_mask[mb_idx].sum().double()))
                world = self.trainer.world_size
                micros = list(torch.split(mb_idx, self.micro_batch_size))
                for j, micro in enumerate(micros):
                    schedule.append({
                        "idx": micro,
                        "denom": max(denom / world, 1.0),
                        "value_denom": None if vdenom is None else max(vdenom / world, 1.0),
                        "last": j == len(micros) - 1,
                        "minibatch": len(mb_idx),
                    })
        return schedule

    # ------------------------------------------------------------------ update
    def training_step(self, batch: int, batch_idx: int):
        item = self.schedule[batch_idx]
        mb = self.samples.select(item["idx"])
        actor_on = self._optim_steps_done >= self.optim_cfg.critic_warmup_steps
        out = self.policy.evaluate(
            mb.obs.to(self.device),
            {k: v.to(self.device) for k, v in mb.records.items()},
            temperature=self.rollout_cfg.temperature_train,
            compute_entropy=True,
            compute_values=self.algorithm.uses_critic,
        )
        loss, metrics = self.algorithm.loss(out, mb, item["denom"], item["value_denom"], actor_enabled=actor_on)
        set_accumulation_boundary(self.trainer.strategy, item["last"])  # DeepSpeed reduces grads at the boundary
        with backward_sync(self.trainer.strategy, enabled=item["last"]):  # DDP all-reduces once per minibatch
            self.manual_backward(loss)
        metrics["train/loss"] = loss.detach()
        n = len(item["idx"])
        for key, value in metrics.items():
            if torch.is_tensor(value) and not torch.isfinite(value):
                self._accumulate(key, 0.0, 0.0)  # keep the key: every rank must reduce the same keys
                continue
            if key in MINIBATCH_NORMALISED:
                # a micro-batch holds a share of its minibatch's mean; scaled so that the
                # size-weighted epoch mean is the mean over minibatches
                value = value * (item["minibatch"] / n)
            self._accumulate(key, value, n)
        if item["last"]:
            self._optimizer_step(actor_on)
        if batch_idx == len(self.schedule) - 1:
            self._log_train_metrics()  # before any callback's on_train_epoch_end reads them
        return loss.detach()

    def _optimizer_step(self, actor_on: bool) -> None:
        opt = self.optimizers()
        sched = self.lr_schedulers()
        if deepspeed_engine(self.trainer.strategy) is not None:
            # DeepSpeed keeps the gradients in its own partitions, clips (gradient_clipping) and steps itself
            grad_norm = deepspeed_step(self.trainer.strategy, opt, freeze_actor=not actor_on)
            sched.step()
            self._accumulate("train/actor/grad_norm", grad_norm, 1)
            opt.zero_grad(set_to_none=True)
            self._optim_steps_done += 1
            return
        if not actor_on:
            value_ids = {id(p) for p in self.policy.value_parameters()}
            for p in self.policy.parameters():
                if id(p) not in value_ids:
                    p.grad = None
        params = [p for p in self.policy.parameters() if p.grad is not None]
        max_norm = self.optim_cfg.clip_grad if self.optim_cfg.clip_grad is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.tensor(0.0)
        grad_norm = torch.as_tensor(grad_norm).float()
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        if torch.isfinite(grad_norm):
            opt.step()
            sched.step()
            self._accumulate("train/actor/grad_norm", grad_norm.detach(), 1)
        else:
            self.skipped_steps += 1
        self._last_values["train/actor/skipped_steps"] = float(self.skipped_steps)
        opt.zero_grad(set_to_none=True)
        self._optim_steps_done += 1
        for group in opt.optimizer.param_groups if hasattr(opt, "optimizer") else opt.param_groups:
            name = "critic" if group.get("name") == "critic" else "actor"
            self._last_values[f"train/{name}/lr"] = float(group["lr"])

    def _accumulate(self, key: str, value: torch.Tensor | float, weight: float) -> None:
        """Add to this epoch's weighted mean of ``key`` (logged once, at epoch end: a
        ``self.log`` per metric and micro-batch costs more than a toy model's update)."""
        value = torch.as_tensor(value, dtype=torch.float64).detach().to("cpu", non_blocking=True)
        total, count = self._train_sums.get(key, (0.0, 0.0))
        self._train_sums[key] = (total + value * weight, count + weight)

    def _log_train_metrics(self) -> None:
        keys = sorted(self._train_sums)
        if keys:
            rows = [torch.stack([torch.as_tensor(total), torch.tensor(float(count))]) for total, count in
                    (self._train_sums[k] for k in keys)]
            sums = self.reducer.sum(torch.stack(rows).double())  # exact means over all ranks' micro-batches
            for key, (total, count) in zip(keys, sums.tolist()):
                if count > 0 and math.isfinite(total / count):
                    self.log(key, total / count, on_step=False, on_epoch=True, batch_size=1)
        for key, value in self._last_values.items():
            self.log(key, value, on_step=False, on_epoch=True, batch_size=1)
        self._train_sums, self._last_values = {}, {}

    def on_train_epoch_end(self) -> None:
        self._log_train_metrics()
        self.log("time/step", time.perf_counter() - self._epoch_t0, on_step=False, on_epoch=True, batch_size=1)
        self.samples = None
        self.schedule = []

    # ------------------------------------------------------------------ eval
    def validation_step(self, batch: int, batch_idx: int):
        t0 = time.perf_counter()
        records = self.run_evaluation()
        metrics = self._episode_metrics(records, "eval")
        per_task = self._per_task(records)
        per_suite = _per_suite(per_task)
        for suite, row in per_suite.items():
            metrics[f"eval/{suite}/success_once"] = row["success_once"]
        metrics["time/eval"] = time.perf_counter() - t0
        for key, value in metrics.items():
            if math.isfinite(value):
                self.log(key, value, on_step=False, on_epoch=True, batch_size=1)
        self.last_eval = {"metrics": metrics, "per_task": per_task, "per_suite": per_suite}
        self._write_eval_table()

    @torch.no_grad()
    def run_evaluation(self) -> list[dict[str, Any]]:
        """Visit every initial state of the eval pool (this rank's share) ``eval_rollout_epoch`` times."""
        env, ro = self.eval_env, self.rollout_cfg
        was_training = self.policy.training
        self.policy.eval()
        records: list[dict[str, Any]] = []
        max_chunks = math.ceil(env.max_episode_steps / self.policy.num_action_chunks) + 1
        progress = self._progress("eval")
        with rollout_mode(self, self.offload_optimizer):
            self._eval_passes(env, ro, max_chunks, progress, records)
        if was_training:
            self.policy.train()
        return records

    def _eval_passes(self, env: Env, ro: RolloutConfig, max_chunks: int, progress, records: list) -> None:
        for _ in range(ro.eval_rollout_epoch):
            env.restart_pool()
            while not env.eval_finished:
                obs = env.reset()
                for _ in range(max_chunks * max(1, len(env.pool))):
                    if not env.any_live:
                        break
                    out = self.policy.act(obs.to(self.device), do_sample=ro.do_sample_eval, temperature=ro.temperature_eval)
                    obs = env.chunk_step(out.actions.cpu()).obs
                    records.extend(env.pop_episodes())
                    if progress is not None:
                        progress(len(records), len(env.pool) * ro.eval_rollout_epoch, "episodes")
                env.flush_episodes()
                records.extend(env.pop_episodes())

    def _per_task(self, records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
        names = self.eval_env.task_names
        sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for r in records:
            sums[r["task_id"]][0] += r["success_once"]
            sums[r["task_id"]][1] += 1
        n_tasks = len(names)
        t = torch.zeros(n_tasks, 2, dtype=torch.float64)
        for task, (s, c) in sums.items():
            if 0 <= task < n_tasks:
                t[task, 0], t[task, 1] = s, c
        t = self.reducer.sum(t)
        return {
            names[i]: {"success_once": float(t[i, 0] / t[i, 1]), "num_trajectories": int(t[i, 1])}
            for i in range(n_tasks)
            if t[i, 1] > 0
        }

    def _write_eval_table(self) -> None:
        if self._trainer is None:
            return
        log_dir = self.trainer.log_dir  # a broadcast under DDP: every rank must call it
        if self.global_rank != 0 or log_dir is None:
            return
        path = Path(log_dir) / "eval"
        path.mkdir(parents=True, exist_ok=True)
        result = {"epoch": self.current_epoch, **self.last_eval}
        (path / f"eval_epoch{self.current_epoch}.json").write_text(json.dumps(result, indent=2))
        lines = ["| task | success_once | trajectories |", "|---|---|---|"]
        rows = list(self.last_eval["per_task"].items()) + [
            (f"**{suite}**", row) for suite, row in self.last_eval.get("per_suite", {}).items()
        ]
        for task, row in rows:
            lines.append(f"| {task} | {100 * row['success_once']:.1f}% | {row['num_trajectories']} |")
        (path / f"eval_epoch{self.current_epoch}.md").write_text("\n".join(lines) + "\n")

    # ------------------------------------------------------------------ metrics
    def _episode_metrics(self, records: list[dict[str, Any]], prefix: str) -> dict[str, float]:
        """Means over all episodes finished on all ranks (exact, not a mean of rank means): the
        standard keys plus the env's declared ``episode_metrics`` (each over the episodes that carry it)."""
        env = self.eval_env if prefix == "eval" else self.env
        extra = [k for k in getattr(env, "episode_metrics", ()) if k not in EPISODE_KEYS]
        keys = [*EPISODE_KEYS, *extra]
        sums = torch.zeros(len(keys), dtype=torch.float64)
        counts = torch.zeros(len(keys), dtype=torch.float64)
        for r in records:
            for i, key in enumerate(keys):
                if key in r:
                    sums[i] += float(r[key])
                    counts[i] += 1
        n_records = torch.tensor([float(len(records))], dtype=torch.float64)
        totals = self.reducer.sum(torch.cat([sums, counts, n_records]))
        sums, counts, n = totals[: len(keys)], totals[len(keys) : -1], float(totals[-1])
        out = {f"{prefix}/num_trajectories": n}
        for i, key in enumerate(keys):
            if counts[i] > 0:
                out[f"{prefix}/{key}"] = float(sums[i] / counts[i])
        return out

    # ------------------------------------------------------------------ checkpoints / export
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rlinf"] = {"optim_steps_done": self._optim_steps_done, "skipped_steps": self.skipped_steps}
        # every rank's RNG and env samplers (a collective: Lightning builds the checkpoint dict on every rank)
        local = {"rng": rng_state(), "env_sampler": [env.sampler_state() for env in self._stage_envs]}
        checkpoint[RESUME_KEY] = gather_rank_states(local)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_frozen(self, checkpoint)  # trainable-only checkpoints (LoRA): frozen weights from model_path
        state = checkpoint.get("rlinf", {})
        self._optim_steps_done = state.get("optim_steps_done", 0)
        self.skipped_steps = state.get("skipped_steps", 0)
        self._pending_rank_states = checkpoint.get(RESUME_KEY)
        if self._pending_rank_states is None and "env_sampler" in state:  # older checkpoints: rank 0's samplers
            self._pending_rank_states = [{"env_sampler": state["env_sampler"]}]

    def on_fit_start(self) -> None:
        states = getattr(self, "_pending_rank_states", None)
        if states is None:
            return
        self._pending_rank_states = None
        world, stages = self.trainer.world_size, len(self._stage_envs)
        why = layout_mismatch(states, world, stages)
        if why is not None:
            if self.global_rank == 0:
                print(f"rlinf: warning: resuming with fresh random state and env samplers: {why}", file=sys.stderr)
            return
        mine = states[self.global_rank]
        for env, sampler in zip(self._stage_envs, mine["env_sampler"]):
            env.load_sampler_state(sampler)
        if "rng" in mine:
            set_rng_state(mine["rng"])  # last: nothing may draw between here and the next rollout

    def on_fit_end(self) -> None:
        bad = first_non_finite(self.policy)
        if bad is not None:  # never export (or leave as the result) a policy full of NaN / inf
            raise ValueError(
                f"the policy has non-finite weights after step {self.trainer.global_step} (e.g. {bad}); not "
                f"exported: lower optim.lr / set optim.clip_grad (train/actor/skipped_steps: {self.skipped_steps})"
            )
        if self.export_policy and self.trainer.log_dir is not None:
            try:
                export_policy(self, Path(self.trainer.log_dir) / "policy")  # gathers sharded policies (all ranks)
            except NotImplementedError:
                pass

    def teardown(self, stage: str) -> None:
        if self.collector is not None and stage == "fit":
            self.collector.close()
        for env in [*self._stage_envs, self.eval_env]:
            if env is not None and env.num_workers:
                env.close()  # stops the worker processes; they restart on the next use


def _per_suite(per_task: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Success per suite for task names of the form ``"<suite>/<task>"`` (e.g. LIBERO-130)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, row in per_task.items():
        if "/" in name:
            suite = name.split("/", 1)[0]
            sums[suite][0] += row["success_once"] * row["num_trajectories"]
            sums[suite][1] += row["num_trajectories"]
    return {k: {"success_once": s / c, "num_trajectories": int(c)} for k, (s, c) in sums.items() if c}


def _lr_lambda(cfg: OptimConfig, total_steps: int, start: int = 0):
    """LR factor per optimizer step: 0 before ``start``, then warm-up and decay over ``total_steps`` steps."""
    warm = max(0, cfg.lr_warmup_steps)
    floor = cfg.min_lr / cfg.lr if cfg.lr > 0 else 0.0

    def fn(step: int) -> float:
        if step < start:
            return 0.0
        step -= start
        if warm and step < warm:
            return (step + 1) / warm
        if cfg.lr_scheduler == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total_steps - warm))
        if cfg.lr_scheduler == "cosine":
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return floor + (1 - floor) * (1 - progress)

    return fn
