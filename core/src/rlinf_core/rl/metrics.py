"""Metric reduction across ranks: exact means over all ranks' episodes and micro-batches."""

from __future__ import annotations

import math
from typing import Any

import torch

from rlinf_core.distributed.reduce import Reducer

EPISODE_KEYS = ("success_once", "success_at_end", "return", "episode_len", "reward")


def episode_metrics(
    records: list[dict[str, Any]], prefix: str, reducer: Reducer, extra_keys: tuple[str, ...] = ()
) -> dict[str, float]:
    """``<prefix>/<key>`` means over all episodes finished on all ranks (exact, not a mean of rank means):
    the standard keys plus ``extra_keys`` (each over the episodes that carry it), and
    ``<prefix>/num_trajectories``. Every rank must call it (a collective)."""
    keys = [*EPISODE_KEYS, *(k for k in extra_keys if k not in EPISODE_KEYS)]
    sums = torch.zeros(len(keys), dtype=torch.float64)
    counts = torch.zeros(len(keys), dtype=torch.float64)
    for r in records:
        for i, key in enumerate(keys):
            if key in r:
                sums[i] += float(r[key])
                counts[i] += 1
    n_records = torch.tensor([float(len(records))], dtype=torch.float64)
    totals = reducer.sum(torch.cat([sums, counts, n_records]))
    sums, counts, n = totals[: len(keys)], totals[len(keys) : -1], float(totals[-1])
    out = {f"{prefix}/num_trajectories": n}
    for i, key in enumerate(keys):
        if counts[i] > 0:
            out[f"{prefix}/{key}"] = float(sums[i] / counts[i])
    return out


def summed_counters(counters: list[dict[str, float]], reducer: Reducer) -> dict[str, float]:
    """Env-level counters (worker restarts, dropped episodes) summed over stages and ranks.

    Every rank must call it with the same keys present (a collective when any are)."""
    counts: dict[str, float] = {}
    for c in counters:
        for key, value in c.items():
            counts[key] = counts.get(key, 0.0) + value
    if not counts:
        return {}
    keys = sorted(counts)
    total = reducer.sum(torch.tensor([counts[k] for k in keys], dtype=torch.float64))
    return {k: float(v) for k, v in zip(keys, total)}


class MetricSums:
    """Weighted sums of the training metrics of one RL step, reduced once at its end (a ``self.log``
    per metric and micro-batch costs more than a toy model's update), plus last values (lr, counters)."""

    def __init__(self) -> None:
        self.sums: dict[str, tuple[torch.Tensor | float, float]] = {}
        self.last: dict[str, float] = {}

    def add(self, key: str, value: torch.Tensor | float, weight: float) -> None:
        value = torch.as_tensor(value, dtype=torch.float64).detach().to("cpu", non_blocking=True)
        total, count = self.sums.get(key, (0.0, 0.0))
        self.sums[key] = (total + value * weight, count + weight)

    def add_micro_batch(self, metrics: dict[str, Any], n: int) -> None:
        """One micro-batch's metrics, each weighted by its ``n`` samples (a loss reports its minibatch's mean, so the
        weighted mean of the step is the mean over minibatches weighted by their sizes)."""
        for key, value in metrics.items():
            if torch.is_tensor(value) and not torch.isfinite(value):
                self.add(key, 0.0, 0.0)  # keep the key: every rank must reduce the same keys
                continue
            self.add(key, value, n)

    def pop(self, reducer: Reducer) -> dict[str, float]:
        """Exact means over all ranks' micro-batches, and the last values; then empty. A collective."""
        out: dict[str, float] = {}
        keys = sorted(self.sums)
        if keys:
            rows = [
                torch.stack([torch.as_tensor(total), torch.tensor(float(count))])
                for total, count in (self.sums[k] for k in keys)
            ]
            sums = reducer.sum(torch.stack(rows).double())
            for key, (total, count) in zip(keys, sums.tolist()):
                if count > 0 and math.isfinite(total / count):
                    out[key] = total / count
        out.update(self.last)
        self.sums, self.last = {}, {}
        return out
