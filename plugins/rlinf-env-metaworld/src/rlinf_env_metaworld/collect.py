"""Collect MetaWorld demonstrations with metaworld's scripted experts into an ``rlinf-demos`` dataset.

Usage::

    python -m rlinf_env_metaworld.collect --tasks reach-v3 push-v3 --episodes-per-task 10 \\
        --out demos/mw --image-size 64 --num-action-chunks 8

Episodes run through :class:`MetaWorldEnv` exactly as a policy would see them (same camera, image
size, instruction and states); trial ``k`` of a task is the env's reset state ``(task, k)`` for
``--trial-seed``, so evaluate on another trial seed for held-out scenes. The dataset format is
described in :mod:`rlinf_core.datasets.demos`.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from rlinf_core.supervised import DemoWriter, LeRobotDemoWriter
from rlinf_env_metaworld.env import MetaWorldEnv
from rlinf_env_metaworld.settings import MetaWorldRenderConfig
from rlinf_env_metaworld.tasks import TASK_SETS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlinf_env_metaworld.collect", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="dataset directory to write")
    p.add_argument("--tasks", nargs="+", default=None, help="task names, e.g. reach-v3 push-v3 (default: --task-set)")
    p.add_argument(
        "--task-set", default="MT10", choices=[s for s in TASK_SETS if s != "MT1"], help="used without --tasks"
    )
    p.add_argument("--split", default="train", choices=["train", "test"], help="ML45 split")
    p.add_argument("--episodes-per-task", type=int, default=10, help="trials 0..N-1 of every task")
    p.add_argument("--trial-seed", type=int, default=0, help="seed of the initial configurations")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--camera-name", default="corner2")
    p.add_argument("--wrist-camera-name", default=None)
    p.add_argument("--no-fast-render", action="store_true", help="keep shadows / anti-aliasing (slower)")
    p.add_argument("--state-type", default="proprio", choices=["proprio", "full", "none"])
    p.add_argument("--max-episode-steps", type=int, default=100)
    p.add_argument("--num-action-chunks", type=int, default=1, help="default chunk length stored for loaders")
    p.add_argument("--num-envs", type=int, default=8, help="sub-envs stepped together")
    p.add_argument(
        "--format",
        default="rlinf",
        choices=["rlinf", "lerobot"],
        help="rlinf-demos (.npz per episode) or a LeRobot v3.0 dataset (parquet + H.264 mp4)",
    )
    p.add_argument("--fps", type=int, default=10, help="frame rate stored in a LeRobot dataset")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset in --out")
    p.add_argument("--quiet", action="store_true")
    return p


def collect(args: argparse.Namespace) -> dict:
    """Run the experts and write the dataset; returns a summary (episodes, successes, seconds)."""
    render = MetaWorldRenderConfig(
        image_size=args.image_size,
        camera_name=args.camera_name,
        wrist_camera_name=args.wrist_camera_name,
        fast_render=not args.no_fast_render,
    )
    env_kwargs = dict(
        tasks=args.tasks,
        task_set=args.task_set,
        split=args.split,
        trials_per_task=args.episodes_per_task,
        trial_seed=args.trial_seed,
        state_type=args.state_type,
        render=render,
        max_episode_steps=args.max_episode_steps,
    )
    probe = MetaWorldEnv(**env_kwargs)
    total = probe.num_reset_states
    env = MetaWorldEnv(**env_kwargs, num_envs=min(args.num_envs, total), is_eval=True, auto_reset=True)
    recorded = {k: asdict(v) if k == "render" else v for k, v in env_kwargs.items() if k != "max_episode_steps"}
    lerobot = getattr(args, "format", "rlinf") == "lerobot"
    writer = (functools.partial(LeRobotDemoWriter, fps=args.fps) if lerobot else DemoWriter)(
        args.out,
        action_dim=env.action_dim,
        num_action_chunks=args.num_action_chunks,
        overwrite=args.overwrite,
        meta={
            "env": "MetaWorldEnv",
            "env_args": recorded,
            "max_episode_steps": args.max_episode_steps,
            "tasks": env.task_names,
            "image_size": args.image_size,
            "collector": "metaworld scripted experts (rlinf_env_metaworld.collect)",
        },
    )
    t0 = time.perf_counter()
    B = env.num_envs
    buffers: list[dict[str, list]] = [{"images": [], "wrist": [], "states": [], "actions": []} for _ in range(B)]
    descriptions: list[str] = [""] * B
    written = successes = steps = 0
    obs = env.reset()
    try:
        while not env.eval_finished:
            actions = env.expert_actions(1)
            ids = env.reset_state_ids
            for b in np.nonzero(ids >= 0)[0]:
                buf = buffers[b]
                buf["images"].append(obs.main_images[b].numpy())
                if obs.wrist_images is not None:
                    buf["wrist"].append(obs.wrist_images[b].numpy())
                if obs.states is not None:
                    buf["states"].append(obs.states[b].numpy())
                buf["actions"].append(actions[b, 0].numpy())
                descriptions[b] = obs.task_descriptions[b]
            out = env.chunk_step(actions)
            steps += int(out.valid.sum())
            records = {r["reset_state_id"]: r for r in env.pop_episodes()}
            for b in np.nonzero(out.dones.any(1).numpy())[0]:
                rec, buf = records[int(ids[b])], buffers[b]
                task_id = int(rec["task_id"])
                writer.add(
                    np.stack(buf["images"]),
                    np.stack(buf["actions"]),
                    descriptions[b],
                    bool(rec["success_once"]),
                    task=env.task_names[task_id],
                    states=np.stack(buf["states"]) if buf["states"] else None,
                    wrist_images=np.stack(buf["wrist"]) if buf["wrist"] else None,
                    task_id=task_id,
                    trial_id=int(ids[b]) % env.trials_per_task,
                    reset_state_id=int(ids[b]),
                )
                written += 1
                successes += int(rec["success_once"])
                buffers[b] = {"images": [], "wrist": [], "states": [], "actions": []}
                if not args.quiet:
                    print(
                        f"\rcollect: {written}/{total} episodes, {successes} successful",
                        end="",
                        file=sys.stderr,
                        flush=True,
                    )
            obs = out.obs
    finally:
        env.close()
    seconds = time.perf_counter() - t0
    writer.meta["collect_seconds"] = round(seconds, 2)
    writer.close()
    if not args.quiet:
        print(
            f"\ncollect: wrote {written} episodes ({successes} successful, {steps} steps, {seconds:.1f} s, "
            f"{steps / max(seconds, 1e-9):.1f} steps/s) to {Path(args.out)}",
            file=sys.stderr,
        )
    return {
        "episodes": written,
        "successful": successes,
        "steps": steps,
        "seconds": seconds,
        "path": str(Path(args.out)),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes_per_task < 1:
        raise SystemExit("collect: --episodes-per-task must be >= 1")
    collect(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
