"""Combinations of an RL config's settings that are legal one by one but nonsensical together, in the parsed config
and in the built module (docs/reliability.md states the rule: an error for what a user would certainly not want, a
one-line warning for what might be deliberate)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _name(node: Any) -> str:
    return str(node.get("class_path", "")).rpartition(".")[2] if isinstance(node, dict) else str(node or "")


def _init(node: Any) -> dict:
    return (node.get("init_args") or {}) if isinstance(node, dict) else {}


def check_combinations(cfg: dict, warn: Callable[[str], None]) -> None:
    """Errors and start warnings for settings that contradict each other (RLModule configs only)."""
    model = cfg.get("model") or {}
    if _name(model) != "RLModule":
        return
    args = _init(model)
    env, policy, algorithm = _init(args.get("env")), _init(args.get("policy")), args.get("algorithm")
    rollout, optim = args.get("rollout") or {}, args.get("optim") or {}
    grpo = _name(algorithm) == "GRPO"
    glob, micro = args.get("global_batch_size", 256), args.get("micro_batch_size", 32)
    if isinstance(glob, int) and isinstance(micro, int) and glob >= 1 and micro >= 1:
        if micro > glob:
            warn(
                f"micro_batch_size ({micro}) is larger than global_batch_size ({glob}): micro-batches hold "
                f"{glob} samples at most"
            )
        elif glob % micro:
            warn(
                f"global_batch_size ({glob}) is not a multiple of micro_batch_size ({micro}): the last "
                "micro-batch of each optimizer step is smaller (losses are weighted by size)"
            )
    for key in ("lr", "value_lr"):
        lr = optim.get(key)
        if isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr > 1:
            warn(
                f"optim.{key} ({lr:g}) is above 1: AdamW moves every weight by about {key} per step, so the first "
                "update wrecks the policy (usual values are 1e-6 to 1e-3)"
            )
    if grpo:
        if rollout.get("do_sample") is False:
            raise ValueError(
                "GRPO with rollout.do_sample: false: greedy rollouts make every member of a group act "
                "alike, so every advantage is zero and nothing is learned; sample (do_sample: true)"
            )
        if (optim.get("critic_warmup_steps") or 0) > 0:
            raise ValueError(
                f"optim.critic_warmup_steps: {optim['critic_warmup_steps']} with GRPO: it has no "
                "critic, so those steps would only freeze the actor; remove it (a PPO setting)"
            )
        if optim.get("value_lr") is not None:
            warn("optim.value_lr is ignored with GRPO (no critic); remove it")
        steps, episode = rollout.get("max_steps_per_rollout_epoch", 100), env.get("max_episode_steps")
        if isinstance(episode, int) and isinstance(steps, int) and steps < episode:
            warn(
                f"rollout.max_steps_per_rollout_epoch ({steps}) is shorter than env.max_episode_steps "
                f"({episode}): GRPO scores whole episodes, and every unfinished one scores as it stands"
            )
        algo, group = _init(algorithm), env.get("group_size", 1)
        if algo.get("filter_rewards") and isinstance(group, int) and group >= 1:
            lo, hi = algo.get("rewards_lower_bound", 0.1), algo.get("rewards_upper_bound", 0.9)
            if not any(lo <= k / group <= hi for k in range(group + 1)):
                warn(
                    f"GRPO's reward filter [{lo}, {hi}] keeps no group of success scores (group means are "
                    f"multiples of 1/{group}): with 0/1 rewards every sample is dropped"
                )
    _warn_long_warmup(cfg, args, env, policy, _init(algorithm), rollout, optim, warn)


def _warn_long_warmup(cfg, args, env, policy, algo, rollout, optim, warn) -> None:
    warmup = optim.get("lr_warmup_steps") or 0
    epochs = (cfg.get("trainer") or {}).get("max_epochs")
    if not (isinstance(warmup, int) and warmup > 0 and isinstance(epochs, int) and epochs >= 0):
        return
    actions = policy.get("actions")  # the OpenVLA policies' config group
    grouped = actions.get("num_action_chunks") if isinstance(actions, dict) else None
    chunks = policy.get("num_action_chunks") or grouped or 1
    samples = (
        (rollout.get("rollout_epoch") or 1)
        * (env.get("num_envs") or 1)
        * max(1, (rollout.get("max_steps_per_rollout_epoch") or 100) // chunks)
    )
    per_step = (algo.get("update_epoch") or 1) * math.ceil(samples / max(1, args.get("global_batch_size") or 256))
    total = epochs * per_step
    if warmup > total:
        warn(
            f"optim.lr_warmup_steps ({warmup}) is longer than the whole run (at most {total} optimizer steps in "
            f"{epochs} RL steps): the learning rate never reaches optim.lr"
        )


def check_built_module(trainer: Any, model: Any, warn: Callable[[str], None]) -> None:
    """Start warnings on the built RL module's sizes (a policy's chunk size may come from its ``model_path``)."""
    env, policy = getattr(model, "env", None), getattr(model, "policy", None)
    samples = getattr(model, "samples_per_rank", None)
    if env is None or policy is None or samples is None:
        return
    chunks, episode = policy.num_action_chunks, env.max_episode_steps
    if episode % chunks:
        algorithm = getattr(model, "algorithm", None)
        trained = (
            "its chunk-level advantage still trains all of them"
            if getattr(algorithm, "reward_type", None) == "chunk_level"
            else "the rest are masked out of the loss"
        )
        warn(
            f"env.max_episode_steps ({episode}) is not a multiple of the policy's num_action_chunks ({chunks}): "
            f"the last chunk of an episode that runs to the limit executes {episode % chunks} of its {chunks} "
            f"actions ({trained})"
        )
    total, glob = samples() * trainer.world_size, model.global_batch_size
    if glob > total:
        warn(
            f"global_batch_size ({glob}) is larger than the {total} samples one RL step collects (env.num_envs x "
            "rollout steps / num_action_chunks x rollout_epoch, all ranks): each RL step makes one optimizer step "
            f"of {total} samples per update epoch"
        )
