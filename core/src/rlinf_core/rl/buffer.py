"""The data of one RL step: its samples, cut into shuffled micro-batches that carry their own data, and the
schedule that cuts them.

:class:`RolloutBuffer` is filled once per RL step (``RLModule.on_train_epoch_start``: trajectories → samples by the
algorithm, then :meth:`RolloutBuffer.fill`). Lightning's loader counts the step's micro-batches;
``RLModule.on_before_batch_transfer`` turns count ``i`` into :meth:`RolloutBuffer.micro_batch` ``(step, i)`` and
``training_step`` receives that :class:`MicroBatch`. The fill is keyed by the RL step it was made for, so a
micro-batch can only be read by the step that filled it.

The schedule: samples of a rank are shuffled per update epoch, cut into minibatches (one optimizer step each) and
each minibatch into micro-batches (gradient accumulation); it is a pure function of the sizes and a seed. The
data types (:class:`Trajectory`, :class:`Samples`, :class:`MicroBatch`) are in :mod:`rlinf_core.rl.data`. Each
micro-batch carries its minibatch's loss denominators, computed at the fill from the algorithm's denominator of a mask
(``Algorithm.denominator``) in one all-reduce per RL step, so the algorithm holds no state of the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rlinf_core.distributed.reduce import Reducer
from rlinf_core.rl.data.micro_batch import Denominators, MicroBatch
from rlinf_core.rl.data.trajectory import Samples


@dataclass(frozen=True)
class ScheduleSlot:
    """The indices of one forward/backward pass.

    Args:
        idx: sample indices into the RL step's :class:`rlinf_core.rl.data.trajectory.Samples` ``[m]``.
        minibatch: index of its minibatch in the step (keys the loss denominators).
        minibatch_size: samples of that minibatch on this rank.
        last: the minibatch's last micro-batch (the optimizer steps after it).
    """

    idx: torch.Tensor
    minibatch: int
    minibatch_size: int
    last: bool


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


def minibatch_denominators(
    samples: Samples,
    minibatch_rows: list[torch.Tensor],
    loss_denominator: Callable[[torch.Tensor], torch.Tensor],
    reduce: Reducer,
    world: int,
) -> list[Denominators]:
    """The loss denominators of every minibatch of an RL step (``minibatch_rows``: the sample indices of each), over
    all ranks in one all-reduce (every rank calls this at the same point: a collective).

    ``loss_denominator`` is the algorithm's denominator of one minibatch's mask on this rank
    (``Algorithm.denominator``); the sum over ranks is divided by ``world`` and kept at least 1.
    """
    local = torch.zeros(len(minibatch_rows), 2, dtype=torch.float64)
    for k, rows in enumerate(minibatch_rows):
        local[k, 0] = loss_denominator(samples.mask[rows])
        if samples.value_mask is not None:
            local[k, 1] = loss_denominator(samples.value_mask[rows])
    total = reduce.sum(local).tolist()
    has_value = samples.value_mask is not None
    return [
        Denominators(max(policy / world, 1.0), max(value / world, 1.0) if has_value else None)
        for policy, value in total
    ]


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


class RolloutBuffer:
    """One RL step's samples and their shuffled micro-batches on this rank.

    Args:
        global_batch_size: samples per optimizer step over all ranks.
        micro_batch_size: samples per forward/backward pass.
        update_epoch: passes over the samples per RL step (a fresh shuffle each).
    """

    def __init__(self, global_batch_size: int, micro_batch_size: int, update_epoch: int) -> None:
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.update_epoch = update_epoch
        self.step: int | None = None  # the RL step the buffer was filled for
        self.samples: Samples | None = None
        self.schedule: list[ScheduleSlot] = []
        self.denominators: list[Denominators] = []  # per minibatch of the step

    # ------------------------------------------------------------------ sizes (known before any rollout)
    def minibatch_sizes(self, samples_per_rank: int, world: int) -> list[int]:
        return minibatch_sizes(samples_per_rank, self.global_batch_size, world)

    def num_micro_batches(self, samples_per_rank: int, world: int) -> int:
        """Micro-batches (``training_step`` calls) of every RL step."""
        return count_micro_batches(
            self.minibatch_sizes(samples_per_rank, world), self.micro_batch_size, self.update_epoch
        )

    def optimizer_steps(self, samples_per_rank: int, world: int) -> int:
        """Optimizer steps of every RL step."""
        return len(self.minibatch_sizes(samples_per_rank, world)) * self.update_epoch

    # ------------------------------------------------------------------ fill / read
    def fill(
        self,
        step: int,
        samples: Samples,
        loss_denominator: Callable[[torch.Tensor], torch.Tensor],
        rank: int = 0,
        world: int = 1,
        reduce: Reducer | None = None,
    ) -> None:
        """Store RL step ``step``'s samples, shuffle them into micro-batches (a seed per step and rank) and compute
        each minibatch's loss denominators with the algorithm's ``loss_denominator`` (summed over ranks by
        ``reduce``, default: this rank only; with a distributed one every rank must call this at the same point)."""
        self.step, self.samples = step, samples
        sizes = self.minibatch_sizes(len(samples), world)
        self.schedule = build_schedule(
            sizes, self.micro_batch_size, self.update_epoch, schedule_seed(world, rank, step)
        )
        self.denominators = minibatch_denominators(
            samples, self.minibatch_rows(), loss_denominator, reduce or Reducer(), world
        )

    def minibatch_rows(self) -> list[torch.Tensor]:
        """Per minibatch of the step, in order: the indices of its samples (what its loss averages over)."""
        rows: dict[int, list[torch.Tensor]] = {}
        for slot in self.schedule:
            rows.setdefault(slot.minibatch, []).append(slot.idx)
        return [torch.cat(rows[k]) for k in sorted(rows)]

    def __len__(self) -> int:
        return len(self.schedule)

    def micro_batch(self, step: int, i: int) -> MicroBatch:
        """The ``i``-th micro-batch of RL step ``step``, with its samples and its minibatch's loss denominators."""
        if self.step != step or self.samples is None:
            raise LookupError(f"the rollout buffer holds RL step {self.step}'s data, not step {step}'s")
        slot = self.schedule[i]
        return MicroBatch(
            samples=self.samples.select(slot.idx),
            idx=slot.idx,
            step=step,
            index=i,
            minibatch=slot.minibatch,
            minibatch_size=slot.minibatch_size,
            denominators=self.denominators[slot.minibatch],
            last=slot.last,
            last_of_step=i == len(self.schedule) - 1,
        )

    def __iter__(self) -> Iterator[MicroBatch]:
        for i in range(len(self)):
            yield self.micro_batch(self.step, i)

    def clear(self) -> None:
        """Drop the step's data (at its end: the samples are the largest object of a step)."""
        self.step, self.samples, self.schedule, self.denominators = None, None, [], []
