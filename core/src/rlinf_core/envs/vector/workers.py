"""Parent side of worker-process envs: any :class:`~rlinf_core.Env` run in ``W > 0`` worker processes
(the worker side is :mod:`rlinf_core.envs.vector.worker_main`).

The env then holds no simulator itself. Its ``num_envs`` sub-envs are split into ``W`` contiguous
slices; worker ``w`` is a separate process that owns ``env.clone(num_envs=B // W)``
sharded to every ``W``-th initial state of the env's own shard, so that

* GRPO groups never straddle workers (``B // W`` must be a multiple of ``group_size``);
* in eval mode the workers' pools partition the env's pool: every reset state is visited exactly
  once across workers (and ranks);
* observations come back through shared memory: each worker writes its rows into shared
  tensors that it sent to the parent once, and the parent copies them into the result batch
  (no pickled image arrays per step);
* a worker that dies (crash, OOM kill, exception in the simulator) is reported with its error.
  In training envs (``is_eval: false``) it is restarted: the chunk it was running comes back
  with ``valid = False`` rows, its running episodes are dropped (never reported as finished)
  and counted in ``env/dropped_episodes``; restarts are counted in ``env/worker_restarts``
  (see :meth:`EnvWorkerPool.pop_metrics`). Eval envs raise instead, since a dropped episode
  would bias the success rate. A worker that fails again right after a restart
  ``MAX_FAILURES_IN_A_ROW`` times is treated as a deterministic bug and raises.

Nothing here is plugin-specific: :class:`rlinf_core.envs.vector.WorkerEnv` (an :class:`EnvWorkerPool` with the
Env API) wraps any env; the RL loop applies it when ``rollout.env_workers > 0``. Plugin-specific extra methods (e.g.
scripted experts that read the simulator) only work in-process, on the env itself.

Hand-written, not ``gymnasium.vector.AsyncVectorEnv``: it restarts a dead worker mid-rollout (counted drops),
keeps GRPO groups and the eval pool split whole per worker, and moves observations through shared memory.

Workers start with the ``forkserver`` method by default (fast restarts, no fork of a process
with threads); set ``RLINF_ENV_WORKER_START=spawn`` to use ``spawn``. ``RLINF_ENV_WORKER_TIMEOUT``
(seconds, default 0 = none) kills a worker that does not answer one command in time and then
handles it like a crash. Workers set ``LP_NUM_THREADS`` (Mesa llvmpipe render threads) to their
share of the cores, ``cores // (num_workers * concurrent_envs)``, or to 0 (render in the
worker's own thread) when that share is one core or less; a value you set wins.

The Env API on top of the pool (``reset``, ``chunk_step``, sampler state, ...) is
:class:`rlinf_core.envs.vector.worker_env.WorkerEnv`.
"""

from __future__ import annotations

import os
import signal
import warnings
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.multiprocessing as tmp  # registers the shared-tensor reductions on ForkingPickler

from rlinf_core.contracts.observation import Observation
from rlinf_core.envs.vector.worker_main import _FINAL_SLOT, _OBS_SLOT, check_worker_split, worker_main

if TYPE_CHECKING:
    from rlinf_core.contracts.env import Env

__all__ = ["EnvWorkerError", "EnvWorkerPool", "check_worker_split"]

MAX_FAILURES_IN_A_ROW = 3


def render_threads(cores: int, processes: int) -> int:
    """Mesa llvmpipe render threads per worker when ``processes`` busy workers share ``cores``.

    A render thread pays off only with a spare core: at a share of one core or less, 0 (rasterize
    in the calling thread) costs ~5-15 % less CPU per image than 1 or 2 threads (measured with
    64² MetaWorld renders, ``benchmarks/bench_e2e.py``), and the cores are busy anyway.
    """
    share = cores // max(1, processes)
    return share if share >= 2 else 0


class EnvWorkerError(RuntimeError):
    """An env worker process died or raised; the message carries the worker's error."""


@dataclass
class _Worker:
    index: int
    lo: int
    hi: int
    process: Any = None
    conn: Any = None
    buffers: dict[int, dict[str, torch.Tensor]] = field(default_factory=lambda: {_OBS_SLOT: {}, _FINAL_SLOT: {}})
    status: dict[str, Any] | None = None
    failures_in_a_row: int = 0

    @property
    def num_envs(self) -> int:
        return self.hi - self.lo


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"exit code {code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"exit code {code}"
    return f"exit code {code}"


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        if w.conn is not None:
            try:
                w.conn.send(("close", ()))
            except (OSError, BrokenPipeError):
                pass
    for w in workers:
        if w.process is not None:
            w.process.join(timeout=5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=5)
        if w.conn is not None:
            w.conn.close()
        w.process = w.conn = None


class EnvWorkerPool:
    """The worker processes behind one env (see :class:`WorkerEnv`).

    Args:
        env: the parent env; its constructor arguments (with ``num_envs = B // W``) build each worker's env.
        num_workers: ``W``, the worker processes (>= 1).
    """

    def __init__(self, env: Env, num_workers: int) -> None:
        if num_workers < 1:
            raise ValueError(f"an env worker pool needs num_workers >= 1, got {num_workers}")
        self.env = env
        W = num_workers
        check_worker_split(env.num_envs, env.group_size, W)
        #: envs of the same run that step at the same time (pipeline stages); their worker processes share the
        #: cores (set by the RL loop before the first reset)
        self.concurrent_envs = 1
        b = env.num_envs // W
        self.workers = [_Worker(index=w, lo=w * b, hi=(w + 1) * b) for w in range(W)]
        args, kwargs = env._init_args
        self._spec = (type(env), args, {**kwargs, "num_envs": b})
        self._episodes: list[dict[str, Any]] = []
        self._frames: list[dict[str, Any]] = []
        self._restarts = 0
        self._dropped = 0
        self._started = False
        method = self._method = os.environ.get("RLINF_ENV_WORKER_START", "forkserver")
        self._ctx = tmp.get_context(method)
        if method == "forkserver":
            # the fork server imports these once, so a worker (or a restart) starts in milliseconds;
            # takes effect when the server starts (first pool of the process)
            preload = ["rlinf_core.envs.vector.workers", "rlinf_core.envs.vector.worker_main"]
            if type(env).__module__ != "__main__":
                preload.append(type(env).__module__)
            self._ctx.set_forkserver_preload(preload)
        self._finalizer = weakref.finalize(self, _shutdown, self.workers)
        #: seconds a worker may take for one command before it counts as hung (0: wait forever)
        self.timeout = float(os.environ.get("RLINF_ENV_WORKER_TIMEOUT", "0") or 0)

    def __getstate__(self) -> dict[str, Any]:
        # a pickled / deep-copied env gets its own (not yet started) workers
        state = {k: v for k, v in self.__dict__.items() if k not in ("_ctx", "_finalizer")}
        state["workers"] = [_Worker(index=w.index, lo=w.lo, hi=w.hi) for w in self.workers]
        state["_started"] = False
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._ctx = tmp.get_context(self._method)
        self._finalizer = weakref.finalize(self, _shutdown, self.workers)

    # ------------------------------------------------------------------ process management
    @property
    def render_threads(self) -> int:
        """``LP_NUM_THREADS`` for the workers: their share of the cores (see :func:`render_threads`)."""
        return render_threads(os.cpu_count() or 1, len(self.workers) * max(1, self.concurrent_envs))

    def _worker_shard(self, w: int) -> tuple[int, int]:
        index, count = self.env._states.shard_spec
        return index + w * count, count * len(self.workers)

    def _launch(self, worker: _Worker) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=worker_main,
            args=(child, self._spec, self._worker_shard(worker.index), self.render_threads),
            name=f"rlinf-env-{type(self.env).__name__}-{worker.index}",
            daemon=True,
        )
        proc.start()
        child.close()
        worker.process, worker.conn = proc, parent
        worker.buffers = {_OBS_SLOT: {}, _FINAL_SLOT: {}}
        worker.status = None

    def _await_ready(self, worker: _Worker) -> None:
        kind, payload = self._recv(worker, "start")
        if kind != "ok":
            hint = ""
            if kind == "dead":
                hint = (
                    " (see the worker's traceback above; a script that creates worker envs at import time "
                    "needs an `if __name__ == '__main__':` guard)"
                )
            raise EnvWorkerError(self._describe(worker, "start", payload) + hint)

    def start(self) -> None:
        """Start every worker process (idempotent); simulators are built on the first reset."""
        if self._started:
            return
        for w in self.workers:
            self._launch(w)
        for w in self.workers:
            self._await_ready(w)
        self._started = True

    def _restart(self, worker: _Worker) -> None:
        self._kill(worker)
        self._launch(worker)
        self._await_ready(worker)
        self._restarts += 1

    @staticmethod
    def _kill(worker: _Worker) -> None:
        if worker.process is not None and worker.process.is_alive():
            worker.process.kill()
        if worker.process is not None:
            worker.process.join(timeout=5)
        if worker.conn is not None:
            worker.conn.close()
        worker.process = worker.conn = None

    def _describe(self, worker: _Worker, cmd: str, error: str) -> str:
        pid = worker.process.pid if worker.process is not None else "?"
        return (
            f"env worker {worker.index}/{len(self.workers)} of {type(self.env).__name__} (sub-envs "
            f"{worker.lo}..{worker.hi - 1}, pid {pid}) failed during {cmd}: {error.rstrip()}"
        )

    def _recv(self, worker: _Worker, cmd: str) -> tuple[str, Any]:
        try:
            if self.timeout and cmd != "start" and not worker.conn.poll(self.timeout):
                worker.process.kill()  # hung (e.g. a deadlocked renderer): handled like a crash
                worker.process.join(timeout=5)
                return "dead", f"no reply within {self.timeout:g} s (RLINF_ENV_WORKER_TIMEOUT); killed it"
            return worker.conn.recv()
        except (EOFError, OSError, ConnectionResetError):
            worker.process.join(timeout=5)
            return "dead", f"the process died ({_signal_name(worker.process.exitcode)})"

    def _send(self, worker: _Worker, cmd: str, args: tuple) -> bool:
        try:
            worker.conn.send((cmd, args))
            return True
        except (OSError, BrokenPipeError):
            return False

    def _call_all(self, cmd: str, per_worker_args: list[tuple]) -> list[tuple[str, Any]]:
        """Send ``cmd`` to every worker first, then collect the replies (workers run in parallel)."""
        self.start()
        sent = [self._send(w, cmd, a) for w, a in zip(self.workers, per_worker_args)]
        replies = []
        for w, ok in zip(self.workers, sent):
            if not ok:
                w.process.join(timeout=5)
                replies.append(("dead", f"the process died ({_signal_name(w.process.exitcode)})"))
            else:
                replies.append(self._recv(w, cmd))
        return replies

    def _handle_failure(self, worker: _Worker, cmd: str, payload: str) -> None:
        """Raise for eval envs and repeated failures; otherwise restart the worker and count drops."""
        message = self._describe(worker, cmd, payload)
        worker.failures_in_a_row += 1
        if self.env.is_eval:
            self.close()
            raise EnvWorkerError(message + " (eval envs are not restarted: a dropped episode would bias eval)")
        if worker.failures_in_a_row > MAX_FAILURES_IN_A_ROW:
            self.close()
            raise EnvWorkerError(message + f" ({MAX_FAILURES_IN_A_ROW} restarts in a row failed too; giving up)")
        dropped = int(worker.status["live"].sum()) if worker.status is not None else 0
        self._dropped += dropped
        warnings.warn(
            f"{message}\nrestarting it; its {dropped} running episode(s) are dropped", RuntimeWarning, stacklevel=3
        )
        self._restart(worker)

    def _absorb(self, worker: _Worker, payload: dict[str, Any], succeeded: bool = True) -> None:
        if succeeded:  # the command itself worked (not just the recovery reset after a restart)
            worker.failures_in_a_row = 0
        self._episodes.extend(payload["episodes"])
        if payload["status"] is not None:
            worker.status = payload["status"]

    # ------------------------------------------------------------------ observations
    def _read(self, worker: _Worker, slot: int, meta: dict[str, Any]) -> dict[str, Any]:
        bufs = worker.buffers[slot]
        bufs.update(meta["new"])
        n = meta["n"]
        return {
            "n": n,
            "text": meta["text"],
            "tensors": {k: (bufs[k][:n] if present else None) for k, present in meta["layout"].items()},
        }

    @staticmethod
    def _merge(parts: list[dict[str, Any]]) -> Observation:
        keys = parts[0]["tensors"].keys()
        tensors = {}
        for k in keys:
            vals = [p["tensors"][k] for p in parts]
            if any(v is None for v in vals):
                if not all(v is None for v in vals):
                    raise EnvWorkerError(f"env workers disagree on whether Observation.{k} is present")
                tensors[k] = None
            else:
                tensors[k] = torch.cat(vals)  # one copy out of the shared buffers
        return Observation(task_descriptions=[t for p in parts for t in p["text"]], **tensors)

    # ------------------------------------------------------------------ frames
    def _capture_for(self, worker: _Worker) -> bool:
        if not self.capture_frames and not self.step_observers:
            return False
        return worker.lo < min(self.env.num_envs, self.env.video_cfg.max_envs)

    def _merge_frames(self, per_worker: list[list[dict[str, Any]]]) -> None:
        lists = [f for f in per_worker if f]
        if not lists:
            return
        V = min(self.env.num_envs, self.env.video_cfg.max_envs)
        for items in zip(*lists):
            self._frames.append(
                {k: np.concatenate([it[k] for it in items])[:V] for k in ("images", "rewards", "success")}
            )

    def close(self) -> None:
        if self._started:
            self._finalizer()
            self._started = False
            self._finalizer = weakref.finalize(self, _shutdown, self.workers)
