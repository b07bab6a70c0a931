"""Chunk-boundary rendering vs rendering every step.

rlinf renders an observation only where the policy looks at it: once per action chunk (the
``Env`` base calls ``_observe`` at chunk boundaries). An env that renders after every physics
step — what a gym-style ``step()`` returning an observation does — pays the render cost ``C``
times per chunk. The "every step" variant here turns on frame capture for all sub-envs, which
makes the base render every sub-env at every sub-step (as a per-step-observation env would).
Variants are measured round-robin, medians reported::

    OMP_NUM_THREADS=1 python benchmarks/bench_render.py [--env auto|metaworld|reach] [--num-envs 8] [--chunks 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from scale_common import env_kind, fmt_table, interleaved, load_line, make_env, random_actions  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--chunks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--steps", type=int, default=3, help="chunk steps per measurement")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    kind, B = env_kind(args.env), args.num_envs
    print(f"env {kind}, B={B}, image {args.image_size}px, {load_line()}")
    boundary = make_env(kind, B, args.image_size, ignore_terminations=True)
    every = make_env(kind, B, args.image_size, ignore_terminations=True)
    every.video_cfg.max_envs = B
    rows = []
    for C in args.chunks:
        acts = random_actions(B, C, boundary.action_dim)
        for env in (boundary, every):
            env.reset()
            env.chunk_step(acts)

        def run(env, capture):
            def fn():
                env.capture_frames = capture
                for _ in range(args.steps):
                    env.chunk_step(acts)
                env.pop_frames()

            return fn

        t = interleaved({"boundary": run(boundary, False), "every": run(every, True)}, args.rounds)
        n = B * C * args.steps
        rows.append((C, f"{n / t['boundary']:.0f}", f"{n / t['every']:.0f}", f"{t['every'] / t['boundary']:.2f}"))
    boundary.close()
    every.close()
    header = ("C (steps per chunk)", "steps/s, render at chunk end", "steps/s, render every step", "speed-up")
    print(fmt_table(rows, header))


if __name__ == "__main__":
    main()
