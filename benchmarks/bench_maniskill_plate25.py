"""PutOnPlateInScene25Main-v3 on the CPU (lavapipe), synthetic assets: what the observation path costs.

The plugin takes camera images from the task's own sensor data (``obs_mode: rgb+segmentation``, so the green
screen applies) but only at chunk boundaries: ManiSkill would otherwise render the 640x480 camera inside every
control step. This prints the seconds of one scene build, a reset, and a control step with ManiSkill's observation
(rgb + segmentation + green screen) vs without it (what the plugin does between observations), and their ratio::

    OMP_NUM_THREADS=1 python benchmarks/bench_maniskill_plate25.py [--steps 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    from rlinf_env_maniskill import lavapipe

    lavapipe.configure()
    import gymnasium as gym
    import torch

    import rlinf_env_maniskill.rl4vla  # noqa: F401
    from rlinf_env_maniskill.synthetic_assets import write_synthetic_assets

    paths = write_synthetic_assets(Path(tempfile.mkdtemp(prefix="plate25-")))
    kw = dict(
        obj_set="train",
        asset_dir=str(paths.asset_dir),
        bridge_dir=str(paths.bridge_dir),
        num_envs=1,
        sim_backend="physx_cpu",
        render_backend="cpu",
        sensor_configs=dict(shader_pack="default"),
    )
    results = {}
    for mode in ("rgb+segmentation", "none"):
        t0 = time.perf_counter()
        env = gym.make("PutOnPlateInScene25Main-v3", obs_mode="rgb+segmentation", **kw).unwrapped
        env._obs_mode = mode  # the task accepts only rgb+segmentation; "none" skips the observation (baseline)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        env.reset(seed=[0], options={"episode_id": torch.tensor([123])})
        reset = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.steps):
            env.step(torch.zeros(1, 7))
        results[mode] = (build, reset, (time.perf_counter() - t0) / args.steps)
        env.close()
    for mode, (build, reset, step) in results.items():
        print(f"{mode:>18}: build {build:6.2f} s, reset {reset:6.3f} s, step {1000 * step:7.1f} ms")
    ratio = results["rgb+segmentation"][2] / results["none"][2]
    print(f"step with observation / step without: {ratio:.1f}x")


if __name__ == "__main__":
    main()
