"""The RL loop as a LightningModule.

One Lightning epoch is one RL step: ``on_train_epoch_start`` collects ``rollout_epoch`` rollouts
with the current policy (no grad, eval mode), computes advantages and fills the step's
:class:`rlinf_core.rl.buffer.RolloutBuffer` (samples, shuffle, the loss denominators of every minibatch); then every
``training_step`` receives one :class:`~rlinf_core.rl.data.micro_batch.MicroBatch` of it
(``on_before_batch_transfer`` turns the loader's count into it, ``transfer_batch_to_device`` moves it), and an
optimizer step is taken at the end of each minibatch (gradient accumulation).
Multi-GPU / multi-node training comes from Lightning's strategies: every rank runs its own envs on its own
share of initial states.

This module is the Lightning wiring only; the pieces live beside it: the rollout (:mod:`.collector`), the
step's data (:mod:`.buffer`), the update (:mod:`.update`), evaluation (:mod:`.evaluation`) and metrics.
"""

from __future__ import annotations

import copy
import functools
import math
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from rlinf_core.callbacks.progress import phase_reporter
from rlinf_core.callbacks.video import RolloutVideoRecorder
from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.env import Env
from rlinf_core.contracts.policy import Policy
from rlinf_core.distributed.fsdp_sharding import export_policy, shard_policy
from rlinf_core.distributed.grad_accumulation import backward_sync, set_accumulation_boundary
from rlinf_core.distributed.reduce import DistReducer
from rlinf_core.distributed.rollout_mode import rollout_mode
from rlinf_core.envs.vector import WorkerEnv, vectorize
from rlinf_core.foundation.checks import check_number
from rlinf_core.foundation.trainer import attached_trainer
from rlinf_core.models.weights import first_non_finite
from rlinf_core.rl.algorithms.base import Algorithm
from rlinf_core.rl.buffer import RolloutBuffer, batch_split_error
from rlinf_core.rl.collector import RolloutCollector
from rlinf_core.rl.config import OptimConfig, RolloutConfig
from rlinf_core.rl.consistency import check_reset_filters, check_rl_sizes
from rlinf_core.rl.data.micro_batch import MicroBatch
from rlinf_core.rl.evaluation import eval_passes, eval_summary, write_eval_table
from rlinf_core.rl.metrics import MetricSums, episode_metrics, summed_counters
from rlinf_core.rl.optim import actor_critic_parameters, configure_adamw
from rlinf_core.rl.update import GradientClip, PrecisionContext, optimizer_step, policy_logprobs, recompute_old_logprobs
from rlinf_core.run.checkpoint_files import install_atomic_io
from rlinf_core.run.checkpointing import restore_frozen
from rlinf_core.run.resume import RESUME_KEY, gather_rank_states, restore_rank_states, rng_state


class RLModule(pl.LightningModule):
    """Fine-tunes a policy with PPO or GRPO in an env. Callbacks read it through
    :class:`rlinf_core.contracts.rl_loop.RLLoop` (``train_envs``, ``eval_env``, ``step_metrics``, ``last_eval``).

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
    ) -> None:
        super().__init__()
        check_number("global_batch_size", global_batch_size, low=1, hint="samples per optimizer step, all ranks")
        check_number("micro_batch_size", micro_batch_size, low=1, hint="samples per forward-backward pass")
        self.automatic_optimization = False
        # worker processes when rollout.env_workers > 0
        self.env: BatchedEnv = vectorize(env, rollout.env_workers)
        self._eval_workers = rollout.env_workers if rollout.eval_env_workers is None else rollout.eval_env_workers
        self.eval_env: BatchedEnv | None = vectorize(eval_env, self._eval_workers)
        self.policy = policy
        self.algorithm = algorithm
        self.rollout_cfg = rollout
        self.optim_cfg = optim
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.export_policy = export_policy
        self.offload_optimizer = offload_optimizer
        check_rl_sizes(env, policy, algorithm, rollout)
        check_reset_filters(env, eval_env)
        self.steps_per_epoch = 0
        self.collector: RolloutCollector | None = None
        self.buffer = RolloutBuffer(global_batch_size, micro_batch_size, algorithm.update_epoch)
        self.reducer = DistReducer()
        self.step_precision = PrecisionContext(self)  # rollouts, evals and updates alike: log-probs agree
        self.last_eval: dict[str, Any] = {}
        self.step_metrics: dict[str, float] = {}  # this RL step's logged values (all ranks), for the progress bar
        self.skipped_steps = 0
        self._train_metrics = MetricSums()
        self._grad_clip = GradientClip()
        self._optim_steps_done = 0
        self._epoch_t0 = 0.0
        self._stage_envs: list[BatchedEnv] = []
        # per-rank RNG and env-sampler states read from a checkpoint: what the next step's rollout starts from
        self._resume_states: list[dict] | None = None
        # algorithm.kl_beta > 0: a frozen copy of the policy as training starts (set in setup; not a submodule, so
        # it is in no checkpoint, optimizer or strategy wrapper)
        self._reference_policy: Policy | None = None

    def check_world_size(self, world: int) -> None:
        """Raise ``ValueError`` (one line) when the sizes cannot run on ``world`` ranks as configured
        (called by ``rlinf fit`` before anything is written, and again at setup)."""
        error = batch_split_error(self.global_batch_size, world)
        if error is not None:
            raise ValueError(error)

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        trainer = attached_trainer(self)
        if trainer is not None:
            install_atomic_io(trainer)  # atomic checkpoint writes, verified weights_only reads
        rank, world = self.global_rank, trainer.world_size if trainer is not None else 1
        if stage == "fit":
            self.check_world_size(world)
        if not self.algorithm.uses_critic:
            for p in self.policy.value_parameters():  # unused without a critic: DDP would wait for their grads
                p.requires_grad_(False)
        if stage == "fit" and self.algorithm.uses_reference and self._reference_policy is None:
            # before configure_model shards the policy and before a checkpoint's weights are restored: the
            # reference is the policy that training starts from (model_path), also after a resume
            reference = copy.deepcopy(self.policy).eval().requires_grad_(False)
            object.__setattr__(self, "_reference_policy", reference)
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
                if isinstance(env, WorkerEnv):
                    env.concurrent_envs = S  # read when its workers start (first reset)
                env.shard(rank * S + s, world * S)
            self.collector = RolloutCollector(
                self._stage_envs,
                self.policy,
                self.algorithm.uses_critic,
                precision=self.step_precision,
                progress=self._phase_reporters(self.env.num_envs * self.policy.num_action_chunks * world),
            )
            self.steps_per_epoch = self.buffer.num_micro_batches(self.samples_per_rank(), world)
        if self.eval_env is None:
            self.eval_env = vectorize(
                self.env.unwrapped.clone(is_eval=True, auto_reset=True, group_size=1), self._eval_workers
            )
        self.eval_env.shard(rank, world)

    @property
    def train_envs(self) -> list[BatchedEnv]:
        """The envs rollouts step, one per pipeline stage (:class:`rlinf_core.contracts.rl_loop.RLLoop`)."""
        return list(self._stage_envs)

    def samples_per_rank(self) -> int:
        """Samples (chunk steps of one env slot) of one RL step on each rank."""
        ro = self.rollout_cfg
        n_chunks = ro.max_steps_per_rollout_epoch // self.policy.num_action_chunks
        return ro.rollout_epoch * n_chunks * self.env.num_envs

    @property
    def optimizer_steps_per_epoch(self) -> int:
        return self.buffer.optimizer_steps(self.samples_per_rank(), self.trainer.world_size)

    def configure_model(self) -> None:
        shard_policy(self)  # FSDP2 (ModelParallelStrategy) only

    def configure_callbacks(self):
        envs = [self.env, self.eval_env]
        if any(e is not None and e.video_cfg.save_video for e in envs):
            return [RolloutVideoRecorder()]
        return []

    def train_dataloader(self):
        # Lightning has no public hook for an epoch driven by data the module makes itself (the rollout), so the
        # loader only counts: it yields 0..n-1, and on_before_batch_transfer turns count i into micro-batch i of the
        # RolloutBuffer filled in on_train_epoch_start. (Lightning may start the loader's iterator before or after
        # that hook, but calls on_before_batch_transfer per batch, after it: tests/core/test_rollout_buffer.py
        # checks the step each batch belongs to, also right after a resume.)
        # Own generator: a DataLoader iterator otherwise draws from the global RNG (its shared seed) at a point
        # Lightning's loop order decides, which a resume from a checkpoint could not reproduce.
        return DataLoader(range(self.steps_per_epoch), batch_size=None, generator=torch.Generator())

    def val_dataloader(self):
        return DataLoader(range(1), batch_size=None, generator=torch.Generator())

    # ------------------------------------------------------------------ optimizers
    def configure_optimizers(self):
        max_epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        actor, critic = actor_critic_parameters(self.policy)
        return configure_adamw(self.optim_cfg, actor, critic, total_steps=max_epochs * self.optimizer_steps_per_epoch)

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
            trajs = self.collector.collect_epochs(
                ro.rollout_epoch, n_chunks, ro.do_sample, ro.temperature_train, self.env.auto_reset
            )
        rollout_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        samples, metrics = self.algorithm.compute(trajs, self.env.group_size, self.reducer, self.env.max_episode_steps)
        metrics["time/advantages"] = time.perf_counter() - t1
        metrics["time/rollout"] = rollout_time
        metrics.update({k: v for k, v in self.collector.times.as_metrics().items() if k != "time/rollout"})
        if ro.recompute_logprobs:
            self.policy.train()  # recompute in the mode the update runs in (dropout etc.)
            with self.step_precision:
                worst = recompute_old_logprobs(
                    self.policy, samples, self.micro_batch_size, self.device, ro.temperature_train
                )
            metrics["rollout/logprob_mismatch"] = float(self.reducer.max(torch.tensor(worst, dtype=torch.float64)))
        if self.algorithm.uses_reference:
            with self.step_precision:
                samples.ref_logprobs = policy_logprobs(
                    self._reference_on_device(), samples, self.micro_batch_size, self.device, ro.temperature_train
                )
        metrics.update(self._episode_metrics([e for env in self._stage_envs for e in env.pop_episodes()], "env"))
        metrics.update(self._env_counters())
        self.buffer.fill(
            self.current_epoch,
            samples,
            self.algorithm.denominator,
            self.global_rank,
            self.trainer.world_size,
            self.reducer,
        )
        if len(self.buffer) != self.steps_per_epoch:  # the loader counts the micro-batches the config's sizes give
            raise RuntimeError(f"the rollout gave {len(samples)} samples, not the {self.samples_per_rank()} planned")
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._log_step(key, float(value))
        self.policy.train()

    def _reference_on_device(self) -> Policy:
        """The reference policy on the policy's device, in the policy's floating dtype when it has one."""
        reference = self._reference_policy
        reference.set_rl_step(self.current_epoch)  # the same schedules (e.g. noise levels) as the policy's
        dtypes = {p.dtype for p in self.policy.parameters() if p.is_floating_point()}
        return reference.to(self.device, dtype=dtypes.pop()) if len(dtypes) == 1 else reference.to(self.device)

    def _env_counters(self) -> dict[str, float]:
        return summed_counters([env.pop_metrics() for env in self._stage_envs], self.reducer)

    def _phase_reporters(self, env_steps_per_chunk: int = 0):
        """A function of a phase's label (``rollout``, ``eval``) giving rank 0's ``(done, total, episodes=None)``
        callback of that phase, drawn by rlinf's progress bar; ``None`` without a trainer or with
        ``rollout.show_progress: false``."""
        if not self.rollout_cfg.show_progress or attached_trainer(self) is None:
            return None
        return functools.partial(phase_reporter, self.trainer, env_steps_per_chunk=env_steps_per_chunk)

    # ------------------------------------------------------------------ update
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if not self.trainer.training:
            return batch  # the validation loader's single item
        return self.buffer.micro_batch(self.current_epoch, batch)  # raises if filled for another RL step

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return batch.to(device) if isinstance(batch, MicroBatch) else batch

    def training_step(self, mb: MicroBatch, batch_idx: int):
        actor_on = self._optim_steps_done >= self.optim_cfg.critic_warmup_steps
        with self.step_precision:
            out = self.policy.evaluate(
                mb.samples.obs,
                mb.samples.records,
                temperature=self.rollout_cfg.temperature_train,
                compute_entropy=True,
                compute_values=self.algorithm.uses_critic,
            )
        loss, metrics = self.algorithm.loss(out, mb, actor_enabled=actor_on)
        set_accumulation_boundary(self.trainer.strategy, mb.last)  # DeepSpeed reduces grads at the boundary
        with backward_sync(self.trainer.strategy, enabled=mb.last):  # DDP all-reduces once per minibatch
            self.manual_backward(loss)
        metrics["train/loss"] = loss.detach() * mb.per_minibatch  # the minibatch's mean, as the loss metrics
        self._train_metrics.add_micro_batch(metrics, len(mb.idx))
        if mb.last:
            stepped = optimizer_step(
                self.policy,
                self.trainer.strategy,
                self.optimizers(),
                self.lr_schedulers(),
                self.optim_cfg.clip_grad,
                actor_on,
                self._train_metrics,
                self._grad_clip,
            )
            self.skipped_steps += not stepped
            self._train_metrics.last["train/actor/skipped_steps"] = float(self.skipped_steps)
            self._optim_steps_done += 1
        if mb.last_of_step:
            self._log_train_metrics()  # before any callback's on_train_epoch_end reads them
        return loss.detach()

    def on_before_optimizer_step(self, optimizer) -> None:
        self._grad_clip()  # under a GradScaler the gradients are unscaled only here (rl.update.GradientClip)

    def _log_train_metrics(self) -> None:
        for key, value in self._train_metrics.pop(self.reducer).items():
            self._log_step(key, value)

    def _log_step(self, key: str, value: float) -> None:
        self.log(key, value, on_step=False, on_epoch=True, batch_size=1)
        self.step_metrics[key] = value

    def on_train_epoch_end(self) -> None:
        self._log_train_metrics()
        self._log_step("time/step", time.perf_counter() - self._epoch_t0)
        self.buffer.clear()

    # ------------------------------------------------------------------ eval
    def validation_step(self, batch: int, batch_idx: int):
        t0 = time.perf_counter()
        self.policy.pop_metrics()  # from this eval only
        records = self.run_evaluation()
        metrics = {**self._episode_metrics(records, "eval"), "time/eval": time.perf_counter() - t0}
        metrics.update({f"eval/{key}": value for key, value in self.policy.pop_metrics().items()})
        self.last_eval = eval_summary(records, metrics, self.eval_env.task_names, self.reducer)
        for key, value in self.last_eval["metrics"].items():
            if math.isfinite(value):
                self.log(key, value, on_step=False, on_epoch=True, batch_size=1)
        self._write_eval_table()

    @torch.no_grad()
    def run_evaluation(self) -> list[dict[str, Any]]:
        """Visit every initial state of the eval pool (this rank's share) ``eval_rollout_epoch`` times."""
        env, ro = self.eval_env, self.rollout_cfg
        was_training = self.policy.training
        self.policy.eval()
        reporters = self._phase_reporters()
        progress = reporters("eval") if reporters is not None else None
        with rollout_mode(self, self.offload_optimizer), self.step_precision:
            records = eval_passes(
                env, self.policy, self.device, ro.eval_rollout_epoch, ro.do_sample_eval, ro.temperature_eval, progress
            )
        if was_training:
            self.policy.train()
        return records

    def _write_eval_table(self) -> None:
        if attached_trainer(self) is None:
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
        self._resume_states = checkpoint.get(RESUME_KEY)

    def on_validation_start(self) -> None:
        if self.eval_env is not None:
            self.eval_env.set_device(self.device)

    def on_fit_start(self) -> None:
        for env in self._stage_envs:
            env.set_device(self.device)  # world-model envs run their models where the policy runs
        states, self._resume_states = self._resume_states, None  # restored once
        if states is None:
            return
        why = restore_rank_states(states, self._stage_envs, self.global_rank, self.trainer.world_size)
        if why is not None and self.global_rank == 0:
            print(f"rlinf: warning: resuming with fresh random state and env samplers: {why}", file=sys.stderr)

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
            if isinstance(env, WorkerEnv):
                env.close()  # stops the worker processes; they restart on the next use
