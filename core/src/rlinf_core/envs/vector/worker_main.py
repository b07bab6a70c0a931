"""Worker side of worker-process envs (see :mod:`rlinf_core.envs.vector.workers` for the design and the parent side).

A worker process builds its env clone, then serves the parent's commands; observations go back through
shared-memory tensors (:class:`_ShmWriter`), everything else through the pipe.
"""

from __future__ import annotations

import os
import signal
import traceback
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlinf_core.contracts.observation import Observation

if TYPE_CHECKING:
    from rlinf_core.contracts.env import Env

__all__ = ["check_worker_split", "worker_main"]

_OBS_SLOT, _FINAL_SLOT = 0, 1


def check_worker_split(num_envs: int, group_size: int, num_workers: int) -> None:
    """Raise a one-line ``ValueError`` if ``num_envs`` does not split into ``num_workers`` workers."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if num_workers and (num_envs % num_workers or (num_envs // num_workers) % group_size):
        raise ValueError(
            f"num_envs ({num_envs}) must split into num_workers ({num_workers}) workers that each hold a "
            f"multiple of group_size ({group_size}) sub-envs, so that no GRPO group straddles two workers"
        )


def _obs_tensors(obs: Observation) -> dict[str, torch.Tensor | None]:
    return {f.name: getattr(obs, f.name) for f in fields(obs) if f.name != "task_descriptions"}


class _ShmWriter:
    """Worker side of the shared-memory observation slots."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.buffers: dict[int, dict[str, torch.Tensor]] = {_OBS_SLOT: {}, _FINAL_SLOT: {}}

    def write(self, slot: int, obs: Observation) -> dict[str, Any]:
        """Copy ``obs`` into the slot's shared tensors; new or resized tensors travel once, in the reply."""
        bufs = self.buffers[slot]
        layout: dict[str, bool] = {}
        new: dict[str, torch.Tensor] = {}
        n = len(obs)
        for name, t in _obs_tensors(obs).items():
            layout[name] = t is not None
            if t is None:
                continue
            shape = (self.rows, *t.shape[1:])
            buf = bufs.get(name)
            if buf is None or tuple(buf.shape) != shape or buf.dtype != t.dtype:
                buf = torch.empty(shape, dtype=t.dtype).share_memory_()
                bufs[name] = buf
                new[name] = buf
            buf[:n].copy_(t)
        return {"n": n, "layout": layout, "new": new, "text": list(obs.task_descriptions)}


def _status(env: Env) -> dict[str, Any]:
    live = np.array([e.live for e in env._episodes], dtype=bool)
    return {
        "live": live,
        "reset_state_ids": env.reset_state_ids,
        "eval_finished": bool(env.eval_finished) if env.is_eval else False,
    }


def _serve(env: Env, shm: _ShmWriter, cmd: str, args: tuple) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if cmd == "reset":
        ids, capture = args
        env.capture_frames = capture
        out["obs"] = shm.write(_OBS_SLOT, env.reset(ids))
    elif cmd == "chunk_step":
        actions, capture = args
        env.capture_frames = capture
        res = env.chunk_step(actions)
        out["arrays"] = {
            k: getattr(res, k).numpy()
            for k in ("rewards", "terminations", "truncations", "success", "valid", "reset_state_ids")
        }
        out["obs"] = shm.write(_OBS_SLOT, res.obs)
        if res.final_obs is not None:
            out["final"] = shm.write(_FINAL_SLOT, res.final_obs)
            out["final_ids"] = res.final_obs_env_ids.numpy()
    elif cmd == "idle":
        # after a restart in a no-auto-reset env: new episodes would start mid-rollout; keep the
        # slots idle (valid False) until the next reset() instead
        env.reset(args[0])
        for b in range(env.num_envs):
            env._episodes[b] = type(env._episodes[b])()
        out["obs"] = shm.write(_OBS_SLOT, env._observe(np.arange(env.num_envs)))
    elif cmd == "flush_episodes":
        env.flush_episodes()
    elif cmd == "restart_pool":
        env.restart_pool()
    elif cmd == "shard":
        env.shard(*args)
    elif cmd == "sampler_state":
        out["value"] = env.sampler_state()
    elif cmd == "load_sampler_state":
        env.load_sampler_state(args[0])
    elif cmd == "build":
        env.ensure_built()
    elif cmd == "ping":
        pass
    else:
        raise ValueError(f"unknown env worker command {cmd!r}")
    out["episodes"] = env.pop_episodes()
    out["frames"] = env.pop_frames()
    out["status"] = _status(env)
    return out


def worker_main(conn, spec: tuple, shard: tuple[int, int], render_threads: int) -> None:
    """Entry point of a worker process: build the env clone, then serve commands until ``close``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    torch.set_num_threads(1)
    # software rendering (Mesa llvmpipe) starts one thread per core in every process: share the
    # cores between the workers instead (a user setting wins)
    os.environ.setdefault("LP_NUM_THREADS", str(render_threads))
    env = None
    try:
        cls, args, kwargs = spec
        env = cls(*args, **kwargs)
        env.shard(*shard)
        shm = _ShmWriter(env.num_envs)
        conn.send(("ok", {"pid": os.getpid()}))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            cmd, args = conn.recv()
        except (EOFError, OSError):  # parent gone
            break
        if cmd == "close":
            try:
                env.close()
            finally:
                conn.send(("ok", {}))
            break
        try:
            reply = ("ok", _serve(env, shm, cmd, args))
        except BaseException:
            reply = ("error", traceback.format_exc())
        conn.send(reply)
