"""Bytes per stored rollout sample: raw uint8 observations vs float pixel values.

Runs a real rollout (collector + GRPO advantages) and reports ``Samples.nbytes_per_sample()``:
rlinf keeps the env's uint8 images (the policy re-preprocesses them in the update), plus states
and the policy's record (action tokens). Compared with storing the same images as float32, and
with storing a VLA's preprocessed ``pixel_values`` (OpenVLA-style fused DINOv2+SigLIP input:
6 x 224 x 224 float32, per camera), then scaled to RLinf's published LIBERO GRPO config
(64 envs x 512 steps / 8-step chunks x 16 rollout epochs = 65,536 samples per RL step)::

    OMP_NUM_THREADS=1 python benchmarks/bench_sample_bytes.py [--env auto|metaworld|reach] [--image-size 224] [--wrist]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rlinf_core.distributed.reduce import Reducer  # noqa: E402
from rlinf_core.rl.algorithms import GRPO  # noqa: E402
from rlinf_core.rl.collector import RolloutCollector  # noqa: E402
from scale_common import ComputePolicy, env_kind, fmt_table, load_line, make_env  # noqa: E402

SEED_SAMPLES = 64 * (512 // 8) * 16


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach"])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--wrist", action="store_true", help="add a wrist camera (MetaWorld: gripperPOV)")
    parser.add_argument("--chunks", type=int, default=8)
    args = parser.parse_args(argv)
    kind, C = env_kind(args.env), args.chunks
    extra = {"wrist_camera_name": "gripperPOV"} if args.wrist and kind == "metaworld" else {}
    env = make_env(kind, 4, args.image_size, group_size=2, max_episode_steps=2 * C, **extra)
    obs = env.reset()
    state_dim = obs.states.shape[1] if obs.states is not None else 0
    policy = ComputePolicy(
        tokens=0, action_dim=env.action_dim, num_action_chunks=C, state_dim=state_dim, add_value_head=False
    ).eval()
    traj = RolloutCollector([env], policy, need_values=False).collect(2, True, 1.0, reset=False)
    env.close()
    samples, _ = GRPO().compute([traj], 2, Reducer())
    stored = samples.nbytes_per_sample()
    cams = 1 + (samples.obs.wrist_images is not None)
    image_bytes = samples.obs.main_images[0].numel() * cams
    other = stored - image_bytes
    float_pixels = 4 * image_bytes + other
    vla_inputs = 6 * 224 * 224 * 4 * cams + other
    rows = [
        ("stored by rlinf (uint8 images + states + record)", stored, 1.0),
        ("same images as float32", float_pixels, float_pixels / stored),
        ("preprocessed VLA pixel_values (6x224x224 float32 per camera)", vla_inputs, vla_inputs / stored),
    ]
    print(f"env {kind}, {args.image_size}px, {cams} camera(s), {len(samples)} samples measured, {load_line()}")
    print(
        fmt_table(
            [(name, f"{b / 1024:.1f} KiB", f"{r:.1f}x", f"{b * SEED_SAMPLES / 2**30:.1f} GiB") for name, b, r in rows],
            ("per sample", "bytes", "vs stored", f"x {SEED_SAMPLES} samples (RLinf's published LIBERO step)"),
        )
    )


if __name__ == "__main__":
    main()
