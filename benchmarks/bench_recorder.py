"""Cost of recording rollouts with ``RolloutRecorder`` (world-model training data) against plain rollouts.

Each measurement resets the env and runs ``--steps`` chunk steps of random actions; the episode then ends by
truncation, so the recorder writes one ``traj*.npy`` per sub-env. Variants, measured round-robin (medians):
plain rollout (observations rendered at chunk boundaries only); rendering every step (frame capture as for a
video of all sub-envs, the floor of any every-frame recording); the recorder at the rendered size; the recorder
resizing frames to ``--record-size``. Ratios are rollout time / the plain rollout's::

    OMP_NUM_THREADS=1 python benchmarks/bench_recorder.py [--env auto|metaworld|reach] [--num-envs 8]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rlinf_core.callbacks.recorder import RolloutRecorder  # noqa: E402
from scale_common import env_kind, fmt_table, interleaved, load_line, make_env, random_actions  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4, help="chunk steps per episode")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--record-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    kind, B, C = env_kind(args.env), args.num_envs, args.chunk
    print(f"env {kind}, B={B}, chunk {C}, {args.steps} chunks per episode, image {args.image_size}px, {load_line()}")
    out = Path(tempfile.mkdtemp(prefix="bench_recorder_"))
    envs, recorders = {}, {}
    variants = (("plain", None), ("render every step", None), ("recorder", None),
                (f"recorder {args.record_size}px", args.record_size))  # fmt: skip
    for name, size in variants:
        env = make_env(kind, B, args.image_size, max_episode_steps=args.steps * C)
        acts = random_actions(B, C, env.action_dim)
        envs[name] = env
        if name == "render every step":  # what any every-frame recording pays: the frames a video would capture
            env.video_cfg.max_envs = B
            env.capture_frames = True
        elif name != "plain":
            recorders[name] = RolloutRecorder(out_dir=str(out / name.replace(" ", "_")), image_size=size)
            recorders[name].attach(env, "train")

    def episode(env):
        def fn():
            env.reset()
            for _ in range(args.steps):
                env.chunk_step(acts)
            env.pop_frames()

        return fn

    for env in envs.values():
        episode(env)()  # warm-up (first render, file system)
    times = interleaved({name: episode(env) for name, env in envs.items()}, args.rounds)
    for name, rec in recorders.items():
        rec.detach(envs[name])
    rows = []
    for name, t in times.items():
        files = recorders[name].written["train"] if name in recorders else []
        mb = sum(p.stat().st_size for p in files) / max(len(files), 1) / 2**20
        rows.append((name, f"{t:.3f}", f"{B * args.steps * C / t:.0f}",
                     f"{t / times['plain']:.2f}x", f"{mb:.2f}" if files else "-"))  # fmt: skip
    print(fmt_table(rows, ("variant", "s / episode batch", "env steps/s", "vs plain", "MB / file")))
    shutil.rmtree(out, ignore_errors=True)
    for env in envs.values():
        env.close()


if __name__ == "__main__":
    main()
