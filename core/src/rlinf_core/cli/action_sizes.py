"""Before anything is built: the action sizes that a config states for both the env and the policy agree.

``action_dim`` (D) and ``num_action_chunks`` (C) may be written in the env's config (a plugin env that takes them,
a world model's ``action_dim`` under ``WorldModelEnv``) and in the policy's (``init_args`` or a group such as
OpenVLA's ``actions:``). When both sides state one and the values differ, the run stops with one line naming both
keys, before a policy's weights are loaded. The rule and its wording are
:func:`rlinf_core.rl.consistency.check_same_action_size`, which the RL module applies again to the built env and
policy (sizes an env only declares as a class attribute, or a policy reads from its ``model_path``).
"""

from __future__ import annotations

from typing import Any

from rlinf_core.rl.consistency import check_same_action_size

SIZE_KEYS = ("action_dim", "num_action_chunks")


def stated_sizes(node: Any, path: str) -> dict[str, list[tuple[str, int]]]:
    """``{key: [(dotted config key, value), ...]}`` for every integer ``action_dim`` / ``num_action_chunks`` in a
    config subtree (init_args, nested class nodes and setting groups)."""
    found: dict[str, list[tuple[str, int]]] = {k: [] for k in SIZE_KEYS}
    if not isinstance(node, dict):
        return found
    for key, value in node.items():
        where = f"{path}.{key}"
        if key in SIZE_KEYS and isinstance(value, int) and not isinstance(value, bool):
            found[key].append((where, value))
        elif isinstance(value, dict):
            for k, items in stated_sizes(value, where).items():
                found[k] += items
    return found


def check_action_sizes(cfg: dict) -> None:
    """``ValueError`` naming both keys when the env (or eval env) and the policy state different action sizes."""
    model = cfg.get("model")
    args = model.get("init_args") if isinstance(model, dict) else None
    if not isinstance(args, dict) or not isinstance(args.get("policy"), dict):
        return
    policy = stated_sizes(args["policy"], "model.init_args.policy")
    for env_key in ("env", "eval_env"):
        env = stated_sizes(args.get(env_key), f"model.init_args.{env_key}")
        for key in SIZE_KEYS:
            for env_size in env[key]:
                for policy_size in policy[key]:
                    check_same_action_size(env_size, policy_size)
