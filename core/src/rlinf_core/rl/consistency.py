"""Parse-time checks of an RL run's pieces against each other (one-line ``ValueError``); single values are checked by
their classes (:func:`rlinf_core.foundation.checks.check_number`)."""

from __future__ import annotations

import numpy as np

from rlinf_core.foundation.checks import ConfigValueError


def check_same_action_size(env: tuple[str, int], policy: tuple[str, int]) -> None:
    """The policy acts in the env's action chunks ``[C, D]``: a size of the policy's (``action_dim``,
    ``num_action_chunks``) is the env's. ``env`` / ``policy``: ``(name, value)`` of that size on each side, the name
    as the message gives it (``env.action_dim``; ``rlinf fit`` gives the YAML key, before anything is built)."""
    (env_name, env_value), (policy_name, policy_value) = env, policy
    if env_value != policy_value:
        raise ConfigValueError(
            f"{env_name} ({env_value}) and {policy_name} ({policy_value}) disagree: the policy's action chunks "
            "[C, D] must be the env's; set both to the same value",
            {env_name: env_value, policy_name: policy_value},
        )


def check_rl_sizes(env, policy, algorithm, rollout) -> None:
    """Raise ``ValueError`` (one line) when the env, policy, algorithm and rollout of an RL run do not fit together."""
    C = policy.num_action_chunks
    check_same_action_size(("env.action_dim", env.action_dim), ("policy.action_dim", policy.action_dim))
    steps = rollout.max_steps_per_rollout_epoch
    if steps % C:
        raise ConfigValueError(
            f"rollout.max_steps_per_rollout_epoch ({steps}) must be a multiple of the policy's num_action_chunks ({C})",
            {"rollout.max_steps_per_rollout_epoch": steps},
        )
    S, B, G = rollout.pipeline_stage_num, env.num_envs, env.group_size
    if S < 1 or B % S or (B // S) % G:
        raise ConfigValueError(
            f"env.num_envs ({B}) must split into rollout.pipeline_stage_num ({S}) stages that are each a multiple "
            f"of env.group_size ({G})",
            {"env.num_envs": B, "rollout.pipeline_stage_num": S, "env.group_size": G},
        )
    algorithm.check(env, policy)


def check_reset_filters(env, eval_env=None) -> None:
    """Raise ``ValueError`` (one line, by key) when a ``task_id_filter`` names a task the env does not have, or the
    filters leave no initial state: otherwise the first reset, inside training, fails."""
    for key, pool in (("env", env), ("eval_env", eval_env)):
        if pool is not None:
            _check_filters(pool, key)


def _check_filters(env, key: str) -> None:

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
