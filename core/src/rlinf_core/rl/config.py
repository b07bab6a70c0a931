"""Nested config groups of :class:`rlinf_core.RLModule` (dataclasses become YAML sections)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlinf_core.foundation.checks import check_number


@dataclass
class RolloutConfig:
    """How rollouts are collected.

    Args:
        rollout_epoch: rollout epochs (env resets) per RL step; their samples are trained on together.
        max_steps_per_rollout_epoch: env steps per rollout epoch (a multiple of the policy's
            ``num_action_chunks``).
        do_sample: sample actions during training rollouts (else greedy).
        temperature_train: sampling temperature of training rollouts (also used to recompute log-probs).
        do_sample_eval: sample actions during eval.
        temperature_eval: sampling temperature during eval.
        eval_rollout_epoch: passes over the eval grid per evaluation.
        pipeline_stage_num: split the envs into this many stages that step while the policy infers
            another stage. Simulators that hold the GIL overlap with inference only in worker
            processes (``env_workers >= 1``).
        env_workers: run the training env's sub-envs in this many worker processes per pipeline stage (0: in the
            training process); each holds ``num_envs / (pipeline_stage_num · env_workers)`` sub-envs, whole GRPO
            groups (see :class:`rlinf_core.envs.vector.WorkerEnv`).
        eval_env_workers: worker processes of the eval env (``null``: ``env_workers``).
        recompute_logprobs: recompute the old log-probs with the training forward (train mode, same
            precision context) after the rollout, use them as the ratio's denominator, and log the
            largest difference to the rollout's as ``rollout/logprob_mismatch``.
        show_progress: show the rollout and eval phases (chunk steps, episodes) in rlinf's progress bar.
    """

    rollout_epoch: int = 1
    max_steps_per_rollout_epoch: int = 100
    do_sample: bool = True
    temperature_train: float = 1.0
    do_sample_eval: bool = False
    temperature_eval: float = 1.0
    eval_rollout_epoch: int = 1
    pipeline_stage_num: int = 1
    env_workers: int = 0
    eval_env_workers: int | None = None
    recompute_logprobs: bool = False
    show_progress: bool = True

    def __post_init__(self) -> None:
        for key in ("rollout_epoch", "max_steps_per_rollout_epoch", "eval_rollout_epoch", "pipeline_stage_num"):
            check_number(f"rollout.{key}", getattr(self, key), low=1)
        check_number("rollout.env_workers", self.env_workers, low=0)
        check_number("rollout.eval_env_workers", self.eval_env_workers, low=0, optional=True)
        for key in ("temperature_train", "temperature_eval"):
            check_number(
                f"rollout.{key}",
                getattr(self, key),
                low=0,
                low_open=True,
                hint="logits are divided by it; use do_sample: false for greedy actions",
            )


@dataclass
class OptimConfig:
    """AdamW settings and the learning-rate schedule (stepped once per optimizer step).

    Args:
        lr: learning rate of the policy.
        value_lr: learning rate of the critic (parameters named ``value_head``); default ``lr``.
        weight_decay: AdamW weight decay.
        adam_beta1: AdamW β1.
        adam_beta2: AdamW β2.
        adam_eps: AdamW ε.
        clip_grad: clip the global gradient norm to this value (``null``: no clipping, norm still logged).
        lr_scheduler: ``constant``, ``cosine`` or ``linear`` decay to ``min_lr`` after warm-up.
        lr_warmup_steps: linear warm-up, in optimizer steps.
        min_lr: final learning rate of the decaying schedules.
        critic_warmup_steps: optimizer steps during which only the critic trains; the actor's schedule
            (``lr_warmup_steps``, decay) starts after them (its learning rate is 0 until then).
    """

    lr: float = 1e-4
    value_lr: float | None = None
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float | None = 1.0
    lr_scheduler: Literal["constant", "cosine", "linear"] = "constant"
    lr_warmup_steps: int = 0
    min_lr: float = 0.0
    critic_warmup_steps: int = 0

    def __post_init__(self) -> None:
        check_number("optim.lr", self.lr, low=0)
        check_number("optim.value_lr", self.value_lr, low=0, optional=True)
        check_number("optim.weight_decay", self.weight_decay, low=0)
        check_number("optim.adam_beta1", self.adam_beta1, low=0, high=1, high_open=True)
        check_number("optim.adam_beta2", self.adam_beta2, low=0, high=1, high_open=True)
        check_number("optim.adam_eps", self.adam_eps, low=0, low_open=True)
        check_number(
            "optim.clip_grad",
            self.clip_grad,
            low=0,
            low_open=True,
            optional=True,
            hint="the largest gradient norm; null turns clipping off",
        )
        check_number("optim.lr_warmup_steps", self.lr_warmup_steps, low=0)
        check_number("optim.min_lr", self.min_lr, low=0, high=self.lr, hint="at most optim.lr")
        check_number("optim.critic_warmup_steps", self.critic_warmup_steps, low=0)
