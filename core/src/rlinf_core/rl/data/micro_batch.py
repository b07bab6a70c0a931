"""One forward/backward pass of an RL step: its samples, where it sits in the step's schedule and the loss
denominators of its minibatch (:class:`rlinf_core.rl.buffer.RolloutBuffer` hands it out)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlinf_core.rl.data.trajectory import Samples


@dataclass(frozen=True)
class Denominators:
    """Loss denominators of one minibatch: the algorithm's denominator of its masks (``Algorithm.denominator``),
    summed over ranks and divided by the world size (at least 1), so that the micro-batch losses accumulated over
    ranks average over the minibatch.

    Args:
        policy: of the policy loss (and the entropy), from the samples' ``mask``.
        value: of the value loss, from ``value_mask`` (``None`` without a critic).
    """

    policy: float
    value: float | None


@dataclass
class MicroBatch:
    """One forward/backward pass of an RL step.

    Args:
        samples: the pass's samples (selected from the step's samples when the micro-batch is handed out).
        idx: indices of ``samples`` in the step's samples ``[m]``.
        step: the RL step it belongs to.
        index: its position in the step (the loader's count).
        minibatch: index of its minibatch in the step (one optimizer step each).
        minibatch_size: samples of that minibatch on this rank.
        denominators: the loss denominators of that minibatch.
        last: the minibatch's last micro-batch (the optimizer steps after it).
        last_of_step: the RL step's last micro-batch.
    """

    samples: Samples
    idx: torch.Tensor
    step: int
    index: int
    minibatch: int
    minibatch_size: int
    denominators: Denominators
    last: bool
    last_of_step: bool

    @property
    def per_minibatch(self) -> float:
        """``minibatch_size / m``: turns this micro-batch's loss, its share of the minibatch's mean, into the
        per-minibatch mean that a loss reports (averaged over micro-batches weighted by their ``m``, the
        minibatch's mean)."""
        return self.minibatch_size / len(self.idx)

    def to(self, device: torch.device | str) -> MicroBatch:
        """The micro-batch with all of its samples on ``device``."""
        return replace(self, samples=self.samples.to(device))
