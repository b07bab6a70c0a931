"""Initial-state sampling of an :class:`rlinf_core.Env`: the filtered, sharded pool of reset state ids, training
draws (a fresh permutation per pass, resumable from checkpoints) and the eval grid (every id once, in order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class ResetStateSampler:
    """Draws reset state ids for one env.

    Args:
        num_reset_states: returns the size of the env's flat (task, trial) index (read lazily: plugins may
            need their data files for it).
        task_ids: maps reset state ids ``int64 [n]`` to task ids ``[n]``.
        seed: seed of the training permutations.
        is_eval: eval grid: visit the pool once, in order, then report nothing left (-1).
        task_id_filter: keep only these task ids.
        reset_state_id_filter: keep only these reset state ids.
        owner: the env's class name, for error messages.
    """

    def __init__(
        self,
        num_reset_states: Callable[[], int],
        task_ids: Callable[[np.ndarray], np.ndarray],
        seed: int = 0,
        is_eval: bool = False,
        task_id_filter: list[int] | None = None,
        reset_state_id_filter: list[int] | None = None,
        owner: str = "Env",
    ) -> None:
        self._num_reset_states = num_reset_states
        self._task_ids = task_ids
        self.seed = seed
        self.is_eval = is_eval
        self.task_id_filter = task_id_filter
        self.reset_state_id_filter = reset_state_id_filter
        self.owner = owner
        self.shard_spec = (0, 1)
        self._pool: np.ndarray | None = None
        self.cursor = 0
        self.rng = np.random.default_rng(seed)

    def shard(self, index: int, count: int) -> None:
        """Use only every ``count``-th id of the filtered index, starting at ``index``."""
        self.shard_spec = (index, count)
        self._pool = None

    @property
    def pool(self) -> np.ndarray:
        """Reset state ids drawn from (after the filters and sharding; permuted in training)."""
        if self._pool is None:
            ids = np.arange(self._num_reset_states())
            if self.task_id_filter is not None:
                ids = ids[np.isin(self._task_ids(ids), self.task_id_filter)]
            if self.reset_state_id_filter is not None:
                ids = ids[np.isin(ids, self.reset_state_id_filter)]
            index, count = self.shard_spec
            ids = ids[index::count]
            if not self.is_eval:
                ids = np.random.default_rng(self.seed).permutation(ids)
            if len(ids) == 0:
                raise ValueError(
                    f"{self.owner}: no initial state left after task_id_filter={self.task_id_filter}, "
                    f"reset_state_id_filter={self.reset_state_id_filter} and sharding {self.shard_spec}"
                )
            self._pool = ids
            self.cursor = 0
        return self._pool

    @property
    def exhausted(self) -> bool:
        """Eval grid: every id of the pool was handed out."""
        return self.cursor >= len(self.pool)

    def restart(self) -> None:
        """Eval grid: hand out the whole pool again."""
        self.cursor = 0

    def draw(self, n: int) -> np.ndarray:
        """``n`` reset state ids (-1 = nothing left on the eval grid); training wraps with a new permutation."""
        pool = self.pool
        out = np.full(n, -1, dtype=np.int64)
        for i in range(n):
            if self.cursor >= len(pool):
                if self.is_eval:
                    break
                self.cursor = 0
                self._pool = self.rng.permutation(pool)
                pool = self._pool
            out[i] = pool[self.cursor]
            self.cursor += 1
        return out

    def state(self) -> dict[str, Any]:
        """Saved in checkpoints so that a resume continues the draws."""
        return {"pool": self.pool.tolist(), "cursor": int(self.cursor), "rng": self.rng.bit_generator.state}

    def load_state(self, state: dict[str, Any]) -> None:
        self._pool = np.asarray(state["pool"], dtype=np.int64)
        self.cursor = int(state["cursor"])
        self.rng.bit_generator.state = state["rng"]
