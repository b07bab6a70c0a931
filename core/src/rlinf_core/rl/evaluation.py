"""Evaluation: passes over an eval env's grid of initial states, and per-task / per-suite success tables."""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_core.callbacks.eval_report import suite_columns
from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.interruption import EpisodesInterrupted
from rlinf_core.contracts.observation_mismatch import first_act
from rlinf_core.contracts.policy import Policy
from rlinf_core.distributed.reduce import Reducer

log = logging.getLogger("rlinf.eval")


@torch.no_grad()
def eval_passes(
    env: BatchedEnv,
    policy: Policy,
    device: torch.device | str,
    passes: int,
    do_sample: bool,
    temperature: float,
    progress: Callable[..., None] | None = None,
) -> list[dict[str, Any]]:
    """Episode records of ``passes`` visits of every initial state of ``env``'s pool (this rank's share).

    A policy that raises :class:`~rlinf_core.contracts.interruption.EpisodesInterrupted` has the episodes in flight
    started again from their reset states; finished episodes were recorded already and stay, once."""
    records: list[dict[str, Any]] = []
    max_chunks = math.ceil(env.max_episode_steps / policy.num_action_chunks) + 1
    for _ in range(passes):
        env.restart_pool()
        while not env.eval_finished:
            obs = env.reset()
            for _ in range(max_chunks * max(1, len(env.pool))):
                if not env.any_live:
                    break
                try:
                    out = first_act(
                        policy, env, lambda: policy.act(obs.to(device), do_sample=do_sample, temperature=temperature)
                    )
                except EpisodesInterrupted as exc:  # e.g. a remote policy's server restarted: nothing counted yet
                    log.warning("%s", exc.reason)
                    obs = env.reset(np.where(env.live_envs, env.reset_state_ids, -1))
                    continue
                obs = env.chunk_step(out.actions.cpu()).obs
                records.extend(env.pop_episodes())
                if progress is not None:
                    progress(len(records), len(env.pool) * passes)
            env.flush_episodes()
            records.extend(env.pop_episodes())
    return records


def per_task(records: list[dict[str, Any]], task_names: list[str], reducer: Reducer) -> dict[str, dict[str, float]]:
    """``{task name: {success_once, num_trajectories}}`` over all ranks' records (a collective)."""
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        sums[r["task_id"]][0] += r["success_once"]
        sums[r["task_id"]][1] += 1
    n_tasks = len(task_names)
    t = torch.zeros(n_tasks, 2, dtype=torch.float64)
    for task, (s, c) in sums.items():
        if 0 <= task < n_tasks:
            t[task, 0], t[task, 1] = s, c
    t = reducer.sum(t)
    return {
        task_names[i]: {"success_once": float(t[i, 0] / t[i, 1]), "num_trajectories": int(t[i, 1])}
        for i in range(n_tasks)
        if t[i, 1] > 0
    }


def per_suite(per_task: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Success per suite for task names of the form ``"<suite>/<task>"`` (e.g. LIBERO-130)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, row in per_task.items():
        if "/" in name:
            suite = name.split("/", 1)[0]
            sums[suite][0] += row["success_once"] * row["num_trajectories"]
            sums[suite][1] += row["num_trajectories"]
    return {k: {"success_once": s / c, "num_trajectories": int(c)} for k, (s, c) in sums.items() if c}


def write_eval_table(directory: Path, epoch: int, result: dict[str, Any]) -> None:
    """``eval_epoch<N>.json`` (everything) and ``eval_epoch<N>.md`` (per-task and per-suite success table)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"eval_epoch{epoch}.json").write_text(json.dumps({"epoch": epoch, **result}, indent=2))
    summary = suite_columns(result.get("per_suite", {}))
    lines = [*summary, ""] if summary else []
    lines += ["| task | success_once | trajectories |", "|---|---|---|"]
    rows = list(result["per_task"].items()) + [
        (f"**{suite}**", row) for suite, row in result.get("per_suite", {}).items()
    ]
    for task, row in rows:
        lines.append(f"| {task} | {100 * row['success_once']:.1f}% | {row['num_trajectories']} |")
    (directory / f"eval_epoch{epoch}.md").write_text("\n".join(lines) + "\n")


def eval_summary(
    records: list[dict[str, Any]], metrics: dict[str, float], task_names: list[str], reduce: Reducer
) -> dict[str, Any]:
    """``RLModule.last_eval``: the eval's ``metrics`` plus per-suite success, the per-task and per-suite tables."""
    tasks = per_task(records, task_names, reduce)
    suites = per_suite(tasks)
    metrics = {**metrics, **{f"eval/{suite}/success_once": row["success_once"] for suite, row in suites.items()}}
    return {"metrics": metrics, "per_task": tasks, "per_suite": suites}
