"""One forward/backward pass of an RL step: its samples and where it sits in the step's schedule
(:class:`rlinf_core.rl.buffer.RolloutBuffer` hands it out)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlinf_core.rl.data.trajectory import Samples


@dataclass
class MicroBatch:
    """One forward/backward pass of an RL step.

    Args:
        samples: the pass's samples (selected from the step's samples when the micro-batch is handed out).
        idx: indices of ``samples`` in the step's samples ``[m]``.
        step: the RL step it belongs to.
        index: its position in the step (the loader's count).
        minibatch: index of its minibatch in the step (one optimizer step each; keys the loss denominators).
        minibatch_size: samples of that minibatch on this rank.
        last: the minibatch's last micro-batch (the optimizer steps after it).
        last_of_step: the RL step's last micro-batch.
    """

    samples: Samples
    idx: torch.Tensor
    step: int
    index: int
    minibatch: int
    minibatch_size: int
    last: bool
    last_of_step: bool

    def to(self, device: torch.device | str) -> MicroBatch:
        """The micro-batch with what the policy evaluates (observations, action records) on ``device``; the
        loss moves the rest it reads."""
        samples = replace(
            self.samples,
            obs=self.samples.obs.to(device),
            records={k: v.to(device) for k, v in self.samples.records.items()},
        )
        return replace(self, samples=samples)
