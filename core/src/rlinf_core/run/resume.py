"""Exact resume: the random state of every rank, saved in checkpoints and restored before the next RL step.

Lightning's checkpoints hold weights, optimizer, LR scheduler and loop counters but no RNG state, and
only rank 0 writes them. :func:`gather_rank_states` collects, on every checkpoint, each rank's
torch / CUDA / numpy / python RNG state plus the initial-state samplers of its pipeline-stage envs, so a run
killed at any moment continues from its last checkpoint with the same random draws (same actions sampled,
same initial states) as an uninterrupted run.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

RESUME_KEY = "rlinf_ranks"


def rng_state() -> dict[str, Any]:
    """This process's torch (CPU and CUDA), numpy and python RNG states."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    # plain tensors and numbers only: checkpoints load with torch.load(weights_only=True)
    numpy_state = (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss))
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def gather_rank_states(local: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``local`` (a collective under torch.distributed: every rank must call it)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [local]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, local)
    return out


def layout_mismatch(states: list[dict[str, Any]] | None, world: int, num_stages: int) -> str | None:
    """Why saved per-rank states cannot be restored (``None``: they can)."""
    if not states:
        return "the checkpoint holds no per-rank random state"
    if len(states) != world:
        return f"it was saved by {len(states)} ranks, this run has {world}"
    saved = len(states[0].get("env_sampler", []))
    if saved != num_stages:
        return f"it was saved with pipeline_stage_num {saved}, this run has {num_stages}"
    return None


def restore_rank_states(states: list[dict[str, Any]], envs: list, rank: int, world: int) -> str | None:
    """Load this rank's env samplers and RNG state from a checkpoint's per-rank states (the RNG last: nothing may
    draw between here and the next rollout); returns why they were not restored (``None`` when they were)."""
    why = layout_mismatch(states, world, len(envs))
    if why is not None:
        return why
    mine = states[rank]
    for env, sampler in zip(envs, mine["env_sampler"]):
        env.load_sampler_state(sampler)
    set_rng_state(mine["rng"])
    return None
