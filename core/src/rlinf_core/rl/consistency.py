"""Parse-time checks of an RL run's pieces against each other (one-line ``ValueError``); single values are checked by
:func:`rlinf_core.foundation.checks.check_number`."""

from __future__ import annotations


def check_rl_sizes(env, policy, algorithm, rollout, global_batch_size: int, micro_batch_size: int) -> None:
    """Raise ``ValueError`` (one line) when the env, policy, algorithm and sizes of an RL run do not fit together."""
    C = policy.num_action_chunks
    if env.action_dim != policy.action_dim:
        raise ValueError(
            f"env {type(env).__name__} has action_dim {env.action_dim} but policy "
            f"{type(policy).__name__} outputs {policy.action_dim}"
        )
    if rollout.max_steps_per_rollout_epoch % C:
        raise ValueError(
            f"rollout.max_steps_per_rollout_epoch ({rollout.max_steps_per_rollout_epoch}) must be a multiple "
            f"of the policy's num_action_chunks ({C})"
        )
    S = rollout.pipeline_stage_num
    if S < 1 or env.num_envs % S or (env.num_envs // S) % env.group_size:
        raise ValueError(
            f"env.num_envs ({env.num_envs}) must split into pipeline_stage_num ({S}) stages that are "
            f"each a multiple of group_size ({env.group_size})"
        )
    algorithm.check(env, policy)
    if micro_batch_size < 1 or global_batch_size < 1:
        raise ValueError("global_batch_size and micro_batch_size must be >= 1")
