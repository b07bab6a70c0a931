"""Time LiberoEnv's simulator builds, resets and steps on this machine.

    python plugins/rlinf-env-libero/benchmarks/bench_libero.py [--suite libero_spatial] [--envs 2]

Prints one line per measurement (seconds, or env steps per second). Steps are counted with
observations at chunk boundaries (8 actions per chunk), as in rollouts.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlinf_env_libero import LiberoEnv, clear_sim_cache  # noqa: E402
from rlinf_env_libero.settings import LiberoRenderConfig, LiberoSimConfig  # noqa: E402


def timed(fn, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def steps_per_second(env: LiberoEnv, chunks: int, chunk: int = 8) -> float:
    acts = torch.zeros(env.num_envs, chunk, 7)
    acts[..., 6] = -1.0
    env.chunk_step(acts)  # warm-up
    elapsed = timed(lambda: env.chunk_step(acts), chunks)
    return env.num_envs * chunk / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=3)
    args = parser.parse_args()
    B = args.envs

    def ids(task: int, first_trial: int = 0) -> np.ndarray:
        return np.array([task * 50 + first_trial + i for i in range(B)])

    for label, render in (
        ("state only", LiberoRenderConfig(obs_mode="state")),
        ("128px fast_render", LiberoRenderConfig(image_size=128, fast_render=True)),
        ("128px standard", LiberoRenderConfig(image_size=128)),
        ("256px fast_render", LiberoRenderConfig(image_size=256, fast_render=True)),
        ("256px standard", LiberoRenderConfig(image_size=256)),
    ):
        clear_sim_cache()
        still, settling = LiberoSimConfig(settle_steps=0, cache_size=B), LiberoSimConfig(settle_steps=10, cache_size=B)
        env = LiberoEnv(task_suite_name=args.suite, num_envs=B, max_episode_steps=10_000, render=render, sim=still)
        cold = timed(lambda: env.reset(reset_state_ids=ids(0)))
        soft = timed(lambda: env.reset(reset_state_ids=ids(0, 5)), 3)
        env.sim = settling
        settle = timed(lambda: env.reset(reset_state_ids=ids(0, 10)), 2)
        env.sim = still
        rebuild = timed(lambda: env.reset(reset_state_ids=ids(1)))  # new task: 1 compile + B-1 scene copies
        back = timed(lambda: env.reset(reset_state_ids=ids(0, 20)))  # task 0's simulators come from the cache
        sps = steps_per_second(env, args.chunks)
        print(
            f"{label:>18}: first reset (build {B}) {cold:6.2f} s | soft reset {soft:5.2f} s "
            f"(+10 settle steps {settle:5.2f} s) | task change (build {B}) {rebuild:6.2f} s | "
            f"back to a cached task {back:5.2f} s | {sps:6.1f} env steps/s "
            f"({B} envs, {env.num_sim_builds} builds)"
        )
        env.close()
    clear_sim_cache()


if __name__ == "__main__":
    main()
