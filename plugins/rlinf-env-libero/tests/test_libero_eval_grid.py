"""Evaluation visits every (task, trial) of a LIBERO suite exactly once across workers."""

import collections
import os
import tempfile

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlinf_env_libero import LiberoEnv, clear_sim_cache  # noqa: E402
from rlinf_env_libero.settings import LiberoRenderConfig, LiberoSimConfig  # noqa: E402

TRIALS = 3
SHARDS = 2


def run_shard(index: int) -> tuple[list[dict], int]:
    # state-only simulators (no renderer, no textures) build fastest; shard 1 reuses the 10 of shard 0
    env = LiberoEnv(
        task_suite_name="libero_goal",
        trials_per_task=TRIALS,
        render=LiberoRenderConfig(obs_mode="state"),
        num_envs=1,
        is_eval=True,
        auto_reset=True,
        ignore_terminations=True,
        max_episode_steps=2,
        sim=LiberoSimConfig(settle_steps=0, cache_size=10),
    )
    try:
        env.shard(index, SHARDS)
        env.reset()
        acts = torch.zeros(1, 2, 7)
        for _ in range(env.num_reset_states):
            if env.eval_finished:
                break
            env.chunk_step(acts)
        assert env.eval_finished
        return env.pop_episodes(), env.num_sim_builds
    finally:
        env.close()


def test_ten_tasks_times_trials_exactly_once_across_two_shards():
    clear_sim_cache()
    try:
        (records0, builds0), (records1, builds1) = [run_shard(i) for i in range(SHARDS)]
    finally:
        clear_sim_cache()
    records = [records0, records1]
    assert builds0 == 10 and builds1 == 0, "one simulator per task, shared through the process's cache"
    ids = [r["reset_state_id"] for shard in records for r in shard]
    assert sorted(ids) == list(range(10 * TRIALS)), "every (task, trial) exactly once"
    assert not set(r["reset_state_id"] for r in records[0]) & set(r["reset_state_id"] for r in records[1])
    per_task = collections.Counter(r["task_id"] for shard in records for r in shard)
    assert per_task == {t: TRIALS for t in range(10)}
    assert all(r["episode_len"] == 2 and r["truncated"] for shard in records for r in shard)
    assert np.mean([r["success_once"] for shard in records for r in shard]) == 0.0  # the arm never moved
