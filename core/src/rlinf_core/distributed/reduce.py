"""Cross-rank reductions of the RL step's statistics: :class:`Reducer` is the identity of a single process,
:class:`DistReducer` sums / takes maxima over all ranks of the default process group."""

from __future__ import annotations

import torch
import torch.distributed as dist


class Reducer:
    """Cross-rank reductions; the identity in a single process (the RL module passes a
    distributed one, so statistics are global, not per rank)."""

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def max(self, x: torch.Tensor) -> torch.Tensor:
        return x


class DistReducer(Reducer):
    """Sums / maxima over all ranks of the default process group (identity without one)."""

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        if not (dist.is_available() and dist.is_initialized()):
            return x
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y

    def max(self, x: torch.Tensor) -> torch.Tensor:
        if not (dist.is_available() and dist.is_initialized()):
            return x
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        return y
