"""A config written for one number of processes, run on another: what changes, in one line at the start of
``rlinf fit`` (the config states its target in ``memory.world_size``, the section ``rlinf memory`` reads)."""

from __future__ import annotations

from rlinf_core.rl.buffer import minibatch_sizes


def world_size_note(
    config_world: int | None, world: int, envs_per_rank: int, samples_per_rank: int, global_batch: int
) -> str | None:
    """One line saying what changes when a config written for ``config_world`` processes runs on ``world``."""
    if not config_world or config_world == world:
        return None

    def steps(w: int) -> int:
        return len(minibatch_sizes(samples_per_rank, global_batch, w))

    return (
        f"rlinf: this config was written for {config_world} processes but runs on {world}: "
        f"{envs_per_rank * world} envs in total instead of {envs_per_rank * config_world}, "
        f"{steps(world)} optimizer steps per RL step instead of {steps(config_world)} "
        f"(scale num_envs by {config_world}/{world} to keep the totals)"
    )
