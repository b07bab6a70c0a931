"""Shared pieces of the scale benchmarks: an env with a realistic per-step cost, a policy with a
tunable inference cost, and a timer.

The env is MetaWorld (``rlinf-env-metaworld``, MuJoCo physics + headless rendering) when that
plugin is installed, else :class:`CostlyReachEnv`: the built-in ReachEnv plus artificial CPU
work per simulated step and per rendered image (pure Python, so it holds the GIL like a
Python-heavy simulator).
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.observation import Observation

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
torch.set_num_threads(1)


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1


class CostlyReachEnv(ReachEnv):
    """ReachEnv with ``step_ms`` of work per simulated sub-env step and ``render_ms`` per image.

    Args:
        step_ms: work per live sub-env per step (physics).
        render_ms: work per rendered sub-env observation.
        cost_mode: ``spin``: pure-Python CPU work that holds the GIL (a Python-heavy CPU
            simulator); ``sleep``: waiting off the CPU (a simulator on another device).
        **kwargs: ReachEnv / Env arguments.
    """

    def __init__(self, step_ms: float = 1.3, render_ms: float = 12.0, cost_mode: str = "spin", **kwargs) -> None:
        super().__init__(**kwargs)
        self.step_ms = step_ms
        self.render_ms = render_ms
        self.cost_mode = cost_mode

    def _cost(self, ms: float) -> None:
        if self.cost_mode == "sleep":
            time.sleep(ms / 1000.0)
        else:
            _spin(ms)

    def _step(self, actions, live):
        self._cost(self.step_ms * int(live.sum()))
        return super()._step(actions, live)

    def _observe(self, env_ids):
        self._cost(self.render_ms * len(env_ids))
        return super()._observe(env_ids)


def metaworld_available() -> bool:
    try:
        import metaworld  # noqa: F401

        import rlinf_env_metaworld  # noqa: F401
    except Exception:
        return False
    return True


def make_env(kind: str, num_envs: int, image_size: int = 128, num_workers: int = 0, **kwargs):
    """``kind``: ``metaworld`` (pick-place, fast render), ``reach`` (CostlyReachEnv, CPU work) or
    ``reach-sleep`` (CostlyReachEnv waiting off the CPU); in ``num_workers`` worker processes when > 0."""
    from rlinf_core.envs.vector import vectorize

    return vectorize(_make_env(kind, num_envs, image_size, **kwargs), num_workers)


def _make_env(kind: str, num_envs: int, image_size: int = 128, **kwargs):
    if kind == "auto":
        kind = "metaworld" if metaworld_available() else "reach"
    if kind == "metaworld":
        from rlinf_env_metaworld.env import MetaWorldEnv
        from rlinf_env_metaworld.settings import MetaWorldRenderConfig

        return MetaWorldEnv(
            task_set="MT1",
            task_name="pick-place-v3",
            render=MetaWorldRenderConfig(
                image_size=image_size, wrist_camera_name=kwargs.pop("wrist_camera_name", None)
            ),
            num_envs=num_envs,
            max_episode_steps=kwargs.pop("max_episode_steps", 10_000),
            **kwargs,
        )
    mode = "sleep" if kind == "reach-sleep" else "spin"
    steps = kwargs.pop("max_episode_steps", 10_000)
    return CostlyReachEnv(image_size=image_size, num_envs=num_envs, max_episode_steps=steps, cost_mode=mode, **kwargs)


def env_kind(kind: str) -> str:
    return ("metaworld" if metaworld_available() else "reach") if kind == "auto" else kind


class ComputePolicy(TinyVLAPolicy):
    """TinyVLAPolicy plus ``depth`` extra ``width``-wide layers over ``tokens`` tokens per sample.

    Real model math (large matmuls, one thread, the GIL released inside them), with a cost
    proportional to the batch like a vision-language model's forward; ``tokens`` is calibrated
    by :func:`calibrate_policy` to match a target time.
    """

    def __init__(self, depth: int = 2, width: int = 512, tokens: int = 64, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens = tokens
        self.extra = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.inp = nn.Linear(self.hidden_size, width)
        self.out = nn.Linear(width, self.hidden_size)

    def _features(self, obs: Observation) -> torch.Tensor:
        feats = super()._features(obs)
        if self.tokens == 0:
            return feats
        h = self.inp(feats).unsqueeze(1).expand(-1, self.tokens, -1)
        for layer in self.extra:
            h = torch.tanh(layer(h))
        return feats + 0.0 * self.out(h.mean(1))


def time_median(fn: Callable[[], object], repeats: int = 3, warmup: bool = False) -> float:
    """Median wall-clock seconds of ``repeats`` calls (after one untimed call if ``warmup``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function, measured round-robin (ABCABC...) so that load changes on
    a shared machine hit every variant alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def calibrate_policy(obs: Observation, target_s: float, action_dim: int, chunks: int, state_dim: int) -> ComputePolicy:
    """A ComputePolicy whose ``act`` on ``obs`` takes about ``target_s`` seconds."""
    kw = dict(action_dim=action_dim, num_action_chunks=chunks, state_dim=state_dim, add_value_head=False)
    probe, base = ComputePolicy(tokens=64, **kw).eval(), ComputePolicy(tokens=0, **kw).eval()
    with torch.no_grad():
        t64 = time_median(lambda: probe.act(obs), 5)
        t0 = time_median(lambda: base.act(obs), 5)
    per_token = max((t64 - t0) / 64, 1e-6)
    tokens = max(1, int(round((target_s - t0) / per_token)))
    return ComputePolicy(tokens=tokens, **kw).eval()


def random_actions(num_envs: int, chunks: int, action_dim: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(num_envs, chunks, action_dim, generator=gen) * 2 - 1) * 0.5


def _work(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def free_cores(n: int = 3_000_000) -> float:
    """Cores this process can get right now: the same work alone vs in 2 processes at once."""
    import multiprocessing as mp

    alone = _work(n)
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_work, [n // 10, n // 10])  # start-up
        both = max(pool.map(_work, [n, n]))
    return min(2.0, 2 * alone / both)


def load_line() -> str:
    try:
        return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) + f", {os.cpu_count()} cores"
    except OSError:
        return ""


def fmt_table(rows: list[tuple], header: tuple) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


__all__ = [
    "ComputePolicy",
    "CostlyReachEnv",
    "calibrate_policy",
    "env_kind",
    "fmt_table",
    "load_line",
    "free_cores",
    "interleaved",
    "make_env",
    "metaworld_available",
    "random_actions",
    "time_median",
    "np",
]


class Clock:
    """Seconds per bucket, from wrapped callables."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)

    def wrap(self, obj, name: str, bucket: str) -> None:
        fn = getattr(obj, name)

        @functools.wraps(fn)  # keeps the LR scheduler's marker on optimizer.step
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[bucket] += time.perf_counter() - t0

        setattr(obj, name, timed)
