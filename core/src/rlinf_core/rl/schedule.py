"""The micro-batch schedule of one RL step: which samples each forward/backward pass takes.

Samples of a rank are shuffled per update epoch, cut into minibatches (one optimizer step each) and
each minibatch into micro-batches (gradient accumulation). The index part is a pure function of the
sizes and a seed; the loss denominators, which need the rollout's masks, come per minibatch from
:func:`minibatch_denominators`. :class:`rlinf_core.rl.buffer.RolloutBuffer` puts both together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ScheduleSlot:
    """The indices of one forward/backward pass.

    Args:
        idx: sample indices into the RL step's :class:`rlinf_core.rl.algorithms.trajectory.Samples` ``[m]``.
        minibatch: index of its minibatch in the step (keys the denominators).
        minibatch_size: samples of that minibatch on this rank.
        last: the minibatch's last micro-batch (the optimizer steps after it).
    """

    idx: torch.Tensor
    minibatch: int
    minibatch_size: int
    last: bool


@dataclass(frozen=True)
class Denominators:
    """Loss denominators of one minibatch, summed over ranks and divided by the world size (>= 1)."""

    policy: float
    value: float | None


def minibatch_sizes(samples_per_rank: int, global_batch_size: int, world: int) -> list[int]:
    """Per-rank minibatch sizes of one update epoch (the last one may be short)."""
    per_rank = min(max(1, global_batch_size // world), samples_per_rank)
    sizes = [per_rank] * (samples_per_rank // per_rank)
    if samples_per_rank % per_rank:
        sizes.append(samples_per_rank % per_rank)
    return sizes


def batch_split_error(global_batch_size: int, world: int) -> str | None:
    """Why ``global_batch_size`` cannot be split evenly over ``world`` ranks (``None`` when it can).

    Each rank takes ``global_batch_size // world`` samples per optimizer step; a remainder would silently
    shrink every optimizer step below the configured batch (the remainder's samples never make a batch).
    """
    if world <= 1 or global_batch_size % world == 0:
        return None
    low = global_batch_size - global_batch_size % world
    return (
        f"global_batch_size ({global_batch_size}) is not a multiple of the world size ({world}): each optimizer "
        f"step would take {low} samples, not {global_batch_size}; set global_batch_size to a multiple of {world} "
        f"(e.g. {low} or {low + world})"
    )


def count_micro_batches(sizes: list[int], micro_batch_size: int, update_epoch: int) -> int:
    """Micro-batches (training steps) of one RL step."""
    return sum(math.ceil(m / micro_batch_size) for m in sizes) * update_epoch


def schedule_seed(world: int, rank: int, epoch: int) -> int:
    """A shuffle seed that differs per RL step (``epoch``) and rank."""
    return (world * 100_003 * (epoch + 1) + rank) * 7 + 12345


def build_schedule(sizes: list[int], micro_batch_size: int, update_epoch: int, seed: int) -> list[ScheduleSlot]:
    """Micro-batches of every update epoch, each epoch a fresh permutation of ``sum(sizes)`` samples."""
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    schedule: list[ScheduleSlot] = []
    minibatch = 0
    for _ in range(update_epoch):
        perm = torch.randperm(n, generator=gen)
        start = 0
        for size in sizes:
            mb_idx = perm[start : start + size]
            start += size
            micros = list(torch.split(mb_idx, micro_batch_size))
            for j, micro in enumerate(micros):
                schedule.append(ScheduleSlot(micro, minibatch, size, j == len(micros) - 1))
            minibatch += 1
    return schedule


def minibatch_denominators(
    schedule: list[ScheduleSlot],
    mask: torch.Tensor,
    value_mask: torch.Tensor | None,
    denominator: Callable[[torch.Tensor], torch.Tensor],
    reduce_sum: Callable[[torch.Tensor], torch.Tensor],
    world: int,
) -> list[Denominators]:
    """Per minibatch: ``denominator`` of its mask (and value mask) over all ranks, divided by ``world``.

    Every rank calls ``reduce_sum`` for the same minibatches in the same order (a collective).
    """
    idx: dict[int, list[torch.Tensor]] = {}
    for mb in schedule:
        idx.setdefault(mb.minibatch, []).append(mb.idx)
    out = []
    for k in sorted(idx):
        rows = torch.cat(idx[k])
        policy = float(reduce_sum(denominator(mask[rows])))
        value = None if value_mask is None else float(reduce_sum(denominator(value_mask[rows])))
        out.append(Denominators(max(policy / world, 1.0), None if value is None else max(value / world, 1.0)))
    return out


def world_size_note(
    config_world: int | None, world: int, envs_per_rank: int, samples_per_rank: int, global_batch: int
) -> str | None:
    """One line saying what changes when a config written for ``config_world`` processes runs on ``world``."""
    if not config_world or config_world == world:
        return None

    def steps(w: int) -> int:
        return math.ceil(samples_per_rank / min(max(1, global_batch // w), samples_per_rank))

    return (
        f"rlinf: this config was written for {config_world} processes but runs on {world}: "
        f"{envs_per_rank * world} envs in total instead of {envs_per_rank * config_world}, "
        f"{steps(world)} optimizer steps per RL step instead of {steps(config_world)} "
        f"(scale num_envs by {config_world}/{world} to keep the totals)"
    )
