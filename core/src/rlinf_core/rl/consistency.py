"""Parse-time checks of an RL run's pieces against each other (one-line ``ValueError``); single values are checked by
:func:`rlinf_core.foundation.checks.check_number`."""

from __future__ import annotations


def check_rl_sizes(env, policy, algorithm, rollout, global_batch_size: int, micro_batch_size: int) -> None:
    """Raise ``ValueError`` (one line) when the env, policy, algorithm and sizes of an RL run do not fit together."""
    C = policy.num_action_chunks
    if env.action_dim != policy.action_dim:
        raise ValueError(
            f"env {type(env).__name__} has action_dim {env.action_dim} but policy "
            f"{type(policy).__name__} outputs {policy.action_dim}: set the policy's action_dim "
            f"(model.init_args.policy.init_args.action_dim, or its actions: group) to {env.action_dim}"
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
    for key, value in (("global_batch_size", global_batch_size), ("micro_batch_size", micro_batch_size)):
        if value < 1:
            raise ValueError(f"{key} must be >= 1, got {value}")


def check_reset_filters(env, eval_env=None) -> None:
    """Raise ``ValueError`` (one line, by key) when a ``task_id_filter`` names a task the env does not have, or the
    filters leave no initial state: otherwise the first reset, inside training, fails."""
    for key, pool in (("env", env), ("eval_env", eval_env)):
        if pool is not None:
            _check_filters(pool, key)


def _check_filters(env, key: str) -> None:
    import numpy as np

    tasks_wanted, states_wanted = getattr(env, "task_id_filter", None), getattr(env, "reset_state_id_filter", None)
    if tasks_wanted is None and states_wanted is None:
        return
    ids = np.arange(env.num_reset_states)
    task_ids = np.asarray(env.task_ids(ids))
    name = type(env).__name__
    if tasks_wanted is not None:
        have = sorted(set(task_ids.tolist()))
        unknown = [t for t in tasks_wanted if t not in have]
        if unknown:
            span = f"task ids {have[0]}..{have[-1]}" if have else "no tasks"
            raise ValueError(f"{key}.task_id_filter {list(tasks_wanted)}: {name} has no task {unknown[0]} ({span})")
        ids = ids[np.isin(task_ids, tasks_wanted)]
    if states_wanted is not None:
        kept = ids[np.isin(ids, states_wanted)]
        if not len(kept):
            raise ValueError(
                f"{key}.reset_state_id_filter {list(states_wanted)[:8]} leaves no initial state of {name} "
                f"({len(ids)} after task_id_filter, ids 0..{env.num_reset_states - 1})"
            )
