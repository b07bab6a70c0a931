"""The RL loop as a LightningModule.

One Lightning epoch is one RL step: ``on_train_epoch_start`` collects ``rollout_epoch`` rollouts
with the current policy (no grad, eval mode), computes advantages, and builds a fresh shuffle of
the samples; then every ``training_step`` processes one micro-batch, and an optimizer step is
taken at the end of each minibatch (gradient accumulation). Multi-GPU / multi-node training comes
from Lightning's strategies: every rank runs its own envs on its own share of initial states.

Size: over 400 lines because it is the one place where the Lightning hooks meet (rollout, update,
eval, checkpoints); the pieces themselves live in :mod:`rlinf_core.training`.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from rlinf_core.rl.algorithms.base import Algorithm
from rlinf_core.run.checkpoint_files import install_atomic_io
from rlinf_core.run.checkpointing import restore_frozen
from rlinf_core.rl.config import OptimConfig, RolloutConfig
from rlinf_core.contracts.env import Env
from rlinf_core.envs.vector import vectorize
from rlinf_core.contracts.policy import Policy
from rlinf_core.models.precision import compute_context
from rlinf_core.run.resume import RESUME_KEY, gather_rank_states, layout_mismatch, rng_state, set_rng_state
from rlinf_core.rl.collector import RolloutCollector
from rlinf_core.rl.trajectory import Samples
from rlinf_core.distributed.strategies import (
    backward_sync,
    deepspeed_engine,
    deepspeed_step,
    export_policy,
    rollout_mode,
    set_accumulation_boundary,
    shard_policy,
)
from rlinf_core.rl.evaluation import eval_passes, per_suite, per_task, write_eval_table
from rlinf_core.rl.metrics import DistReducer, MetricSums, episode_metrics, summed_counters
from rlinf_core.rl.optim import configure_adamw
from rlinf_core.rl.schedule import (
    Denominators,
    MicroBatch,
    ScheduleDataset,
    batch_split_error,
    build_schedule,
    count_micro_batches,
    minibatch_denominators,
    minibatch_sizes,
    schedule_seed,
    world_size_note,
)
from rlinf_core.rl.validation import first_non_finite

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
        config_world_size: processes (GPUs) this config's sizes were written for (``num_envs`` is
            per process, ``global_batch_size`` over all): on another world size, rank 0 prints one
            line at the start of fit with the total envs and optimizer steps per RL step that change.
        gpu_memory_gb: memory of one GPU the config is written for (GiB); only read by
            ``rlinf memory`` to check that the estimate fits.
    """

    restores_frozen_weights = True  # RLCheckpoint may leave frozen parameters out (see rlinf_core.run.checkpointing)

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
        config_world_size: int | None = None,
        gpu_memory_gb: float = 80.0,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.env = vectorize(env)  # worker processes when env.num_workers > 0
        self.eval_env = vectorize(eval_env)
        self.policy = policy
        self.algorithm = algorithm
        self.rollout_cfg = rollout
        self.optim_cfg = optim
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.export_policy = export_policy
        self.offload_optimizer = offload_optimizer
        self.config_world_size = config_world_size
        self.gpu_memory_gb = gpu_memory_gb
        self._validate()
        self.steps_per_epoch = 0
        self.collector: RolloutCollector | None = None
        self.samples: Samples | None = None
        self.schedule: list[MicroBatch] = []
        self.denominators: list[Denominators] = []  # per minibatch of this RL step, at its first training_step
        self._schedule_epoch = -1  # the RL step self.schedule was built for
        self._pending_rank_states: list[dict] | None = None  # per-rank RNG / samplers read from a checkpoint
        self.reducer = DistReducer()
        self.last_eval: dict[str, Any] = {}
        self.step_metrics: dict[str, float] = {}  # this RL step's logged values (all ranks), for the progress bar
        self.skipped_steps = 0
        self._train_metrics = MetricSums()
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
        self.algorithm.check(self.env, self.policy)
        if self.micro_batch_size < 1 or self.global_batch_size < 1:
            raise ValueError("global_batch_size and micro_batch_size must be >= 1")

    def check_world_size(self, world: int) -> None:
        """Raise ``ValueError`` (one line) when the sizes cannot run on ``world`` ranks as configured
        (called by ``rlinf fit`` before anything is written, and again at setup)."""
        error = batch_split_error(self.global_batch_size, world)
        if error is not None:
            raise ValueError(error)

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        if self._trainer is not None:
            install_atomic_io(self.trainer)  # atomic checkpoint writes, verified weights_only reads
        rank, world = self.global_rank, self.trainer.world_size if self._trainer is not None else 1
        if stage == "fit":
            self.check_world_size(world)
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
                env.concurrent_envs = S  # read when its workers start (first reset)
                env.shard(rank * S + s, world * S)
            self.collector = RolloutCollector(self._stage_envs, self.policy, self.algorithm.uses_critic)
            self.steps_per_epoch = self._count_training_steps(world)
            note = world_size_note(
                self.config_world_size, world, self.env.num_envs, self._samples_per_rank(), self.global_batch_size
            )
            if note and rank == 0:
                print(note, file=sys.stderr, flush=True)
        if self.eval_env is None:
            self.eval_env = self.env.clone(is_eval=True, auto_reset=True, group_size=1)
        self.eval_env.shard(rank, world)

    def _samples_per_rank(self) -> int:
        ro = self.rollout_cfg
        n_chunks = ro.max_steps_per_rollout_epoch // self.policy.num_action_chunks
        return ro.rollout_epoch * n_chunks * self.env.num_envs

    def _minibatch_sizes(self, world: int) -> list[int]:
        return minibatch_sizes(self._samples_per_rank(), self.global_batch_size, world)

    def _count_training_steps(self, world: int) -> int:
        return count_micro_batches(self._minibatch_sizes(world), self.micro_batch_size, self.algorithm.update_epoch)

    @property
    def optimizer_steps_per_epoch(self) -> int:
        return len(self._minibatch_sizes(self.trainer.world_size)) * self.algorithm.update_epoch

    def configure_model(self) -> None:
        shard_policy(self)  # FSDP2 (ModelParallelStrategy) only

    def configure_callbacks(self):
        envs = [self.env, self.eval_env]
        if any(e is not None and e.video_cfg.save_video for e in envs):
            from rlinf_core.callbacks.video import RolloutVideoRecorder

            return [RolloutVideoRecorder()]
        return []

    def train_dataloader(self):
        # own generator: a DataLoader iterator otherwise draws from the global RNG (its shared seed) at a point
        # Lightning's loop order decides, which a resume from a checkpoint could not reproduce
        return DataLoader(ScheduleDataset(self._build_schedule), batch_size=None, generator=torch.Generator())

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        return batch  # a MicroBatch indexes the CPU-side samples; training_step moves its slice

    def val_dataloader(self):
        return DataLoader(range(1), batch_size=None, generator=torch.Generator())

    # ------------------------------------------------------------------ optimizers
    def configure_optimizers(self):
        value_ids = {id(p) for p in self.policy.value_parameters()}
        params = [p for p in self.policy.parameters() if p.requires_grad]
        max_epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        return configure_adamw(
            self.optim_cfg,
            [p for p in params if id(p) not in value_ids],
            [p for p in params if id(p) in value_ids],
            total_steps=max_epochs * self.optimizer_steps_per_epoch,
        )

    # ------------------------------------------------------------------ rollout
    def on_train_epoch_start(self) -> None:
        self._epoch_t0 = time.perf_counter()
        self.step_metrics = {}
        ro = self.rollout_cfg
        n_chunks = ro.max_steps_per_rollout_epoch // self.policy.num_action_chunks
        self.policy.set_rl_step(self.current_epoch)
        self.policy.eval()
        t0 = time.perf_counter()
        with rollout_mode(self, self.offload_optimizer):
            trajs = self._collect_rollouts(ro, n_chunks)
        rollout_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        samples, metrics = self.algorithm.compute(trajs, self.env.group_size, self.reducer, self.env.max_episode_steps)
        metrics["time/advantages"] = time.perf_counter() - t1
        metrics["time/rollout"] = rollout_time
        metrics.update({k: v for k, v in self.collector.times.as_metrics().items() if k != "time/rollout"})
        if ro.recompute_logprobs:
            self.policy.train()  # recompute in the mode the update runs in (dropout etc.)
            with self._compute_context():
                metrics["rollout/logprob_mismatch"] = self._recompute_old_logprobs(samples)
        metrics.update(self._episode_metrics([e for env in self._stage_envs for e in env.pop_episodes()], "env"))
        metrics.update(self._env_counters())
        self.samples = samples
        self.denominators = []  # computed at the first training_step (the schedule may not exist yet)
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._log_step(key, float(value))
        self.policy.train()

    def _collect_rollouts(self, ro: RolloutConfig, n_chunks: int) -> list:
        trajs = []
        for r in range(ro.rollout_epoch):
            reset = not self.env.auto_reset or self.collector.last_obs[0] is None
            label = f"rollout {r + 1}/{ro.rollout_epoch}" if ro.rollout_epoch > 1 else "rollout"
            env_steps_per_chunk = self.env.num_envs * self.policy.num_action_chunks * self.trainer.world_size
            progress = self._progress(label, env_steps_per_chunk)
            # same precision context as training_step, so rollout and update log-probs agree
            with self._compute_context():
                traj = self.collector.collect(n_chunks, ro.do_sample, ro.temperature_train, reset=reset, progress=progress)
            trajs.append(traj)
            if not self.env.auto_reset:
                for env in self._stage_envs:
                    env.flush_episodes()
        return trajs

    def _compute_context(self):
        """The trainer's precision context for rollouts, evals and updates (the same in all three, so
        rollout and update log-probs agree). DeepSpeed's bf16/fp16 mode casts the module but has no
        autocast; rlinf adds one so that float32 observations meet the half-precision weights."""
        if self._trainer is None:
            return nullcontext()
        half = {"bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16, "16-mixed": torch.float16,
                "16-true": torch.float16}.get(str(self.trainer.precision))
        if half is not None and deepspeed_engine(self.trainer.strategy) is not None:
            return compute_context(self.device, half)
        return self.trainer.precision_plugin.forward_context()

    def _env_counters(self) -> dict[str, float]:
        return summed_counters([env.pop_metrics() for env in self._stage_envs], self.reducer)

    def _progress(self, label: str, env_steps_per_chunk: int = 0):
        """Rank 0's ``(done, total, episodes=None)`` callback of a rollout or eval, drawn by rlinf's
        progress bar (``None`` without it or with ``rollout.show_progress: false``)."""
        if not self.rollout_cfg.show_progress or self._trainer is None:
            return None
        from rlinf_core.callbacks.progress import phase_reporter

        return phase_reporter(self.trainer, label, env_steps_per_chunk)

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

    def _build_schedule(self) -> list[MicroBatch]:
        """This RL step's micro-batches (called when the epoch's dataloader iterator starts, which can be
        before ``on_train_epoch_start``: the indices need only sizes and the epoch; denominators come later)."""
        world = self.trainer.world_size
        epoch = self._upcoming_epoch()
        self.schedule = build_schedule(
            self._minibatch_sizes(world), self.micro_batch_size, self.algorithm.update_epoch,
            schedule_seed(world, self.global_rank, epoch),
        )
        self._schedule_epoch = epoch
        return self.schedule

    def _upcoming_epoch(self) -> int:
        """The RL step whose micro-batches the dataloader iterator being started will hand out.

        Not ``current_epoch``: Lightning starts the first epoch's iterator in ``FitLoop.setup_data``, which in a
        fit resumed from an end-of-epoch checkpoint runs while ``current_epoch`` still names the checkpoint's
        finished epoch (Lightning advances it only in ``on_run_start``), so the first RL step after a resume
        would reuse the previous step's shuffle (a different micro-batch split and summation order: resumed
        runs drifted from uninterrupted ones). ``epoch_progress.current.processed`` counts the finished epochs
        (it is incremented before ``on_train_epoch_end`` writes the checkpoint), i.e. names the epoch about to
        run at every point where Lightning starts the iterator: fresh start, resume, and each later epoch."""
        if self._trainer is None:
            return self.current_epoch
        return self.trainer.fit_loop.epoch_progress.current.processed

    # ------------------------------------------------------------------ update
    def training_step(self, batch: MicroBatch, batch_idx: int):
        if not self.denominators:
            # Lightning starts the epoch's iterator (building the schedule) before on_train_epoch_start in
            # the first epoch and after it in the others; here both the schedule and the samples exist
            if self._schedule_epoch != self.current_epoch:  # exact resume depends on it: never train on another's
                raise RuntimeError(
                    f"rlinf: internal error: RL step {self.current_epoch} got the micro-batch schedule of step "
                    f"{self._schedule_epoch} (the dataloader iterator started at an unexpected point of the loop)"
                )
            self.denominators = minibatch_denominators(
                self.schedule, self.samples.mask, self.samples.value_mask, self.algorithm.denominator,
                self.reducer.sum, self.trainer.world_size,
            )
        mb = self.samples.select(batch.idx)
        denom = self.denominators[batch.minibatch]
        actor_on = self._optim_steps_done >= self.optim_cfg.critic_warmup_steps
        with self._compute_context():
            out = self.policy.evaluate(
                mb.obs.to(self.device),
                {k: v.to(self.device) for k, v in mb.records.items()},
                temperature=self.rollout_cfg.temperature_train,
                compute_entropy=True,
                compute_values=self.algorithm.uses_critic,
            )
        loss, metrics = self.algorithm.loss(out, mb, denom.policy, denom.value, actor_enabled=actor_on)
        set_accumulation_boundary(self.trainer.strategy, batch.last)  # DeepSpeed reduces grads at the boundary
        with backward_sync(self.trainer.strategy, enabled=batch.last):  # DDP all-reduces once per minibatch
            self.manual_backward(loss)
        metrics["train/loss"] = loss.detach()
        self._train_metrics.add_micro_batch(metrics, len(batch.idx), batch.minibatch_size)
        if batch.last:
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
            self._train_metrics.add("train/actor/grad_norm", grad_norm, 1)
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
            self._train_metrics.add("train/actor/grad_norm", grad_norm.detach(), 1)
        else:
            self.skipped_steps += 1
        self._train_metrics.last["train/actor/skipped_steps"] = float(self.skipped_steps)
        opt.zero_grad(set_to_none=True)
        self._optim_steps_done += 1
        for group in opt.optimizer.param_groups if hasattr(opt, "optimizer") else opt.param_groups:
            name = "critic" if group.get("name") == "critic" else "actor"
            self._train_metrics.last[f"train/{name}/lr"] = float(group["lr"])

    def _log_train_metrics(self) -> None:
        for key, value in self._train_metrics.pop(self.reducer).items():
            self._log_step(key, value)

    def _log_step(self, key: str, value: float) -> None:
        self.log(key, value, on_step=False, on_epoch=True, batch_size=1)
        self.step_metrics[key] = value

    def on_train_epoch_end(self) -> None:
        self._log_train_metrics()
        self._log_step("time/step", time.perf_counter() - self._epoch_t0)
        self.samples = None
        self.schedule, self.denominators = [], []

    # ------------------------------------------------------------------ eval
    def validation_step(self, batch: int, batch_idx: int):
        t0 = time.perf_counter()
        records = self.run_evaluation()
        metrics = self._episode_metrics(records, "eval")
        tasks = per_task(records, self.eval_env.task_names, self.reducer)
        suites = per_suite(tasks)
        for suite, row in suites.items():
            metrics[f"eval/{suite}/success_once"] = row["success_once"]
        metrics["time/eval"] = time.perf_counter() - t0
        for key, value in metrics.items():
            if math.isfinite(value):
                self.log(key, value, on_step=False, on_epoch=True, batch_size=1)
        self.last_eval = {"metrics": metrics, "per_task": tasks, "per_suite": suites}
        self._write_eval_table()

    @torch.no_grad()
    def run_evaluation(self) -> list[dict[str, Any]]:
        """Visit every initial state of the eval pool (this rank's share) ``eval_rollout_epoch`` times."""
        env, ro = self.eval_env, self.rollout_cfg
        was_training = self.policy.training
        self.policy.eval()
        progress = self._progress("eval")
        with rollout_mode(self, self.offload_optimizer), self._compute_context():
            records = eval_passes(
                env, self.policy, self.device, ro.eval_rollout_epoch, ro.do_sample_eval, ro.temperature_eval, progress
            )
        if was_training:
            self.policy.train()
        return records

    def _write_eval_table(self) -> None:
        if self._trainer is None:
            return
        log_dir = self.trainer.log_dir  # a broadcast under DDP: every rank must call it
        if self.global_rank == 0 and log_dir is not None:
            write_eval_table(Path(log_dir) / "eval", self.current_epoch, self.last_eval)

    # ------------------------------------------------------------------ metrics
    def _episode_metrics(self, records: list[dict[str, Any]], prefix: str) -> dict[str, float]:
        """Means over all episodes finished on all ranks: the standard keys plus the env's declared
        ``episode_metrics`` (see :func:`rlinf_core.rl.metrics.episode_metrics`)."""
        env = self.eval_env if prefix == "eval" else self.env
        return episode_metrics(records, prefix, self.reducer, tuple(getattr(env, "episode_metrics", ())))

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

    def on_validation_start(self) -> None:
        if self.eval_env is not None:
            self.eval_env.set_device(self.device)

    def on_fit_start(self) -> None:
        for env in self._stage_envs:
            env.set_device(self.device)  # world-model envs run their models where the policy runs
        states = self._pending_rank_states
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
