"""Scripted-expert demonstrations of the built-in :class:`~rlinf_core.builtin.toy_env.ReachEnv`, written
with :class:`~rlinf_core.datasets.demos.DemoWriter`: an SFT dataset for tests of policy plugins."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.contracts.observation import Observation
from rlinf_core.datasets.demos import DemoWriter


def reach_expert(obs: Observation) -> np.ndarray:
    """Head straight for the instructed target: ``[B, 2]`` actions in [-1, 1]."""
    pos, target = obs.states[:, :2].numpy(), obs.states[:, 2:].numpy()
    return np.clip((target - pos) / 0.08, -1, 1).astype(np.float32)


def collect_reach_demos(
    root: str | Path,
    episodes: int = 30,
    num_action_chunks: int = 2,
    max_episode_steps: int = 20,
    trials_per_task: int = 10,
    image_size: int = 32,
) -> None:
    """Record ``episodes`` expert episodes (cycling over the trials) into a demo dataset at ``root``."""
    env = ReachEnv(
        num_envs=1, image_size=image_size, max_episode_steps=max_episode_steps, trials_per_task=trials_per_task
    )
    writer = DemoWriter(root, action_dim=2, num_action_chunks=num_action_chunks, meta={"env": "ReachEnv"})
    for k in range(episodes):
        obs = env.reset(np.array([k % env.num_reset_states]))
        images, states, actions = [], [], []
        while True:
            act = reach_expert(obs)
            images.append(obs.main_images[0].numpy())
            states.append(obs.states[0].numpy())
            actions.append(act[0])
            out = env.chunk_step(act[:, None])
            obs = out.obs
            if out.dones.any():
                break
        writer.add(
            np.stack(images),
            np.stack(actions),
            obs.task_descriptions[0],
            bool(out.success.any()),
            task="reach",
            states=np.stack(states),
        )
    writer.close()
