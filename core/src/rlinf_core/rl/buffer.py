"""The data of one RL step: its samples, cut into shuffled micro-batches that carry their own data and loss
denominators.

:class:`RolloutBuffer` is filled once per RL step (``RLModule.on_train_epoch_start``: trajectories → samples by the
algorithm, then :meth:`RolloutBuffer.fill`) and read by every ``training_step`` of that step
(:meth:`RolloutBuffer.micro_batch`). The fill is keyed by the RL step it was made for, so a micro-batch can only be
read by the step that filled it. The index math (minibatch sizes, shuffles, denominators) is in
:mod:`rlinf_core.rl.schedule`; the storage types (:class:`Trajectory`, :class:`Samples`) in
:mod:`rlinf_core.rl.algorithms.trajectory`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rlinf_core.rl.schedule import (
    Denominators,
    ScheduleSlot,
    build_schedule,
    count_micro_batches,
    minibatch_denominators,
    minibatch_sizes,
    schedule_seed,
)
from rlinf_core.rl.algorithms.trajectory import Samples


@dataclass
class MicroBatch:
    """One forward/backward pass of an RL step.

    Args:
        samples: the pass's samples (selected from the step's samples when the micro-batch is handed out).
        denominators: loss denominators of its minibatch (summed over all ranks).
        idx: indices of ``samples`` in the step's samples ``[m]``.
        minibatch: index of its minibatch in the step (one optimizer step each).
        minibatch_size: samples of that minibatch on this rank.
        last: the minibatch's last micro-batch (the optimizer steps after it).
        last_of_step: the RL step's last micro-batch.
    """

    samples: Samples
    denominators: Denominators
    idx: torch.Tensor
    minibatch: int
    minibatch_size: int
    last: bool
    last_of_step: bool


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
        self.denominators: list[Denominators] = []  # per minibatch
        # per-rank RNG and env-sampler states read from a checkpoint: what the next step's rollout starts from
        self.resume_states: list[dict] | None = None

    # ------------------------------------------------------------------ sizes (known before any rollout)
    def minibatch_sizes(self, samples_per_rank: int, world: int) -> list[int]:
        return minibatch_sizes(samples_per_rank, self.global_batch_size, world)

    def num_micro_batches(self, samples_per_rank: int, world: int) -> int:
        """Micro-batches (``training_step`` calls) of every RL step."""
        return count_micro_batches(self.minibatch_sizes(samples_per_rank, world), self.micro_batch_size,
                                   self.update_epoch)

    def optimizer_steps(self, samples_per_rank: int, world: int) -> int:
        """Optimizer steps of every RL step."""
        return len(self.minibatch_sizes(samples_per_rank, world)) * self.update_epoch

    # ------------------------------------------------------------------ fill / read
    def fill(
        self,
        step: int,
        samples: Samples,
        denominator: Callable[[torch.Tensor], torch.Tensor],
        reduce_sum: Callable[[torch.Tensor], torch.Tensor],
        rank: int = 0,
        world: int = 1,
    ) -> None:
        """Store RL step ``step``'s samples, shuffle them into micro-batches (a seed per step and rank) and compute
        each minibatch's loss denominators (``reduce_sum`` is a collective: every rank fills at the same point)."""
        self.step, self.samples = step, samples
        sizes = self.minibatch_sizes(len(samples), world)
        self.schedule = build_schedule(sizes, self.micro_batch_size, self.update_epoch,
                                       schedule_seed(world, rank, step))
        self.denominators = minibatch_denominators(
            self.schedule, samples.mask, samples.value_mask, denominator, reduce_sum, world
        )

    def __len__(self) -> int:
        return len(self.schedule)

    def micro_batch(self, step: int, i: int) -> MicroBatch:
        """The ``i``-th micro-batch of RL step ``step``, with its samples."""
        if self.step != step or self.samples is None:
            raise LookupError(f"the rollout buffer holds RL step {self.step}'s data, not step {step}'s")
        slot = self.schedule[i]
        return MicroBatch(
            samples=self.samples.select(slot.idx),
            denominators=self.denominators[slot.minibatch],
            idx=slot.idx,
            minibatch=slot.minibatch,
            minibatch_size=slot.minibatch_size,
            last=slot.last,
            last_of_step=i == len(self.schedule) - 1,
        )

    def __iter__(self) -> Iterator[MicroBatch]:
        for i in range(len(self)):
            yield self.micro_batch(self.step, i)

    def clear(self) -> None:
        """Drop the step's data (at its end: the samples are the largest object of a step)."""
        self.step, self.samples, self.schedule, self.denominators = None, None, [], []

    def take_resume_states(self) -> list[dict] | None:
        """The per-rank states a checkpoint recorded (once: ``None`` afterwards)."""
        states, self.resume_states = self.resume_states, None
        return states
