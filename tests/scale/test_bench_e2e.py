"""The end-to-end benchmark's simulator-only baselines do the work the training env does (same steps, same renders)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

pytest.importorskip("metaworld")
pytest.importorskip("rlinf_env_metaworld")

import bench_e2e  # noqa: E402
from rlinf_env_metaworld.env import MetaWorldEnv  # noqa: E402
from rlinf_env_metaworld.settings import MetaWorldRenderConfig  # noqa: E402

pytestmark = pytest.mark.slow

TASKS = ["button-press-topdown-v3", "drawer-close-v3"]


def test_raw_simulator_matches_env_cadence():
    """Chunks of 4 over a horizon of 6: the last chunk runs 2 live steps; one render per sub-env per chunk."""
    kw = dict(image_size=16, camera_name="corner", fast_render=True)
    env = MetaWorldEnv(tasks=TASKS, trials_per_task=5, num_envs=4, group_size=2, max_episode_steps=6,
                       ignore_terminations=True, render=MetaWorldRenderConfig(**kw))  # fmt: skip
    env_only = bench_e2e.EnvOnly([env], n_chunks=2, chunk=4)
    raw = bench_e2e.RawSim(tasks=TASKS, num_envs=4, n_chunks=2, chunk=4, max_episode_steps=6, **kw)
    try:
        steps_env = env_only()
        renders_env = env.num_renders
        steps_raw = raw()
        renders_raw = raw.renders
    finally:
        env_only.close()
        raw.close()
    assert steps_env == steps_raw == 4 * 6
    assert renders_env == renders_raw == 4 * 3  # reset + 2 chunks


def test_breakdown_adds_up_to_the_epoch():
    row = {"wall": 10.0, "time/step": 9.0, "time/rollout": 6.0, "time/rollout_policy": 1.0,
           "time/rollout_env_wait": 4.5, "time/advantages": 0.1, "clock/update forward": 1.0,
           "clock/update backward": 1.2, "clock/optimizer step + clip": 0.2, "clock/checkpoint": 0.6,
           "clock/logger": 0.1}  # fmt: skip
    parts = dict(bench_e2e._breakdown([row]))
    assert sum(parts.values()) == pytest.approx(10.0)
    assert parts["rollout: collector bookkeeping"] == pytest.approx(0.5)
    assert parts["update: loss, metrics, Lightning loop"] == pytest.approx(0.5)
    assert parts["epoch end: other (metric reduction, hooks)"] == pytest.approx(0.3)
