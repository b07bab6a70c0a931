"""What callbacks and tools read of the RL loop's LightningModule (:class:`rlinf_core.rl.module.RLModule`).

A callback takes any ``LightningModule``; ``isinstance(pl_module, RLLoop)`` tells the RL loop (RL steps, envs)
from a supervised one (epochs), and then these names are all it reads of it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.policy import Policy

__all__ = ["RLLoop"]


@runtime_checkable
class RLLoop(Protocol):
    """The public state of an RL run, for callbacks (video, rollout recording, progress, summaries)."""

    #: the policy being trained
    policy: Policy
    #: the env evaluation runs in (``None`` until ``setup`` builds the default one)
    eval_env: BatchedEnv | None
    #: this RL step's logged values (all ranks reduced), e.g. ``train/actor/policy_loss``, ``env/success_once``
    step_metrics: dict[str, float]
    #: the last evaluation's results: ``metrics`` (``eval/...``), ``per_task`` and ``per_suite`` tables
    last_eval: dict[str, Any]
    #: micro-batches of this RL step's update (known once its rollout is in)
    steps_per_epoch: int

    @property
    def train_envs(self) -> list[BatchedEnv]:
        """The envs rollouts step, one per pipeline stage (empty before ``setup("fit")``)."""
        ...
