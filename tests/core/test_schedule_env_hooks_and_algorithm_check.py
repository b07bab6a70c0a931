"""The update schedule, the env base's hooks (episode_info, _close, the reset-state sampler) and Algorithm.check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.reset_states import ResetStateSampler
from rlinf_core.rl.algorithms.grpo import GRPO
from rlinf_core.rl.algorithms.ppo import PPO
from rlinf_core.rl.buffer import build_schedule, count_micro_batches, minibatch_sizes


def test_schedule_covers_every_sample_once_per_update_epoch_and_marks_minibatch_ends():
    sizes = minibatch_sizes(samples_per_rank=10, global_batch_size=8, world=2)
    assert sizes == [4, 4, 2]
    sched = build_schedule(sizes, micro_batch_size=3, update_epoch=2, seed=1)
    assert len(sched) == count_micro_batches(sizes, 3, 2) == 10
    for epoch in range(2):
        mbs = [m for m in sched if epoch * 3 <= m.minibatch < (epoch + 1) * 3]
        assert sorted(torch.cat([m.idx for m in mbs]).tolist()) == list(range(10))
    ends = [m for m in sched if m.last]
    assert len(ends) == 6 and all(sum(len(x.idx) for x in sched if x.minibatch == m.minibatch) == m.minibatch_size
                                  for m in ends)  # fmt: skip
    assert not torch.equal(sched[0].idx, build_schedule(sizes, 3, 2, seed=2)[0].idx)


class FlagEnv(ReachEnv):
    episode_metrics = ("hit_once", "touches")
    closed = 0

    def _step(self, actions, live):
        out = super()._step(actions, live)
        for slot in np.nonzero(live)[0]:
            self.episode_info(int(slot), reduce="max", hit_once=float(slot == 0))
            self.episode_info(int(slot), reduce="sum", touches=1.0)
        return out

    def _close(self) -> None:
        type(self).closed += 1


def test_episode_info_lands_in_records_and_undeclared_keys_are_refused():
    env = FlagEnv(num_envs=2, max_episode_steps=3)
    env.reset()
    env.chunk_step(np.zeros((2, 3, 2), np.float32))
    records = sorted(env.pop_episodes(), key=lambda r: r["hit_once"])
    assert [r["hit_once"] for r in records] == [0.0, 1.0]
    assert all(r["touches"] == 3.0 for r in records)
    with pytest.raises(ValueError, match="undeclared metrics \\['other'\\].*episode_metrics"):
        env.episode_info(0, other=1.0)


def test_close_calls_the_plugin_hook_only_after_a_build_and_the_env_builds_again():
    FlagEnv.closed = 0
    env = FlagEnv(num_envs=2)
    env.close()
    assert FlagEnv.closed == 0
    env.reset()
    env.close()
    env.close()
    assert FlagEnv.closed == 1
    env.reset()  # builds again
    env.close()
    assert FlagEnv.closed == 2


def test_eval_grid_visits_every_state_once_and_training_draws_wrap():
    grid = ResetStateSampler(lambda: 7, lambda ids: np.asarray(ids) // 3, is_eval=True, task_id_filter=[0, 2])
    assert grid.draw(5).tolist() == [0, 1, 2, 6, -1] and grid.exhausted
    train = ResetStateSampler(lambda: 4, lambda ids: np.zeros_like(ids), seed=3)
    train.shard(1, 2)
    assert sorted(train.draw(4).tolist()) == [1, 1, 3, 3]


def test_each_algorithm_refuses_an_env_or_policy_it_cannot_train():
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=False)
    with pytest.raises(ValueError, match="group_size > 1"):
        GRPO().check(ReachEnv(num_envs=2), policy)
    with pytest.raises(ValueError, match="auto_reset: false"):
        GRPO().check(_auto_reset_group_env(), policy)
    with pytest.raises(ValueError, match="add_value_head: true"):
        PPO().check(ReachEnv(num_envs=2), policy)
    GRPO().check(ReachEnv(num_envs=2, group_size=2), policy)


def _auto_reset_group_env():
    env = ReachEnv(num_envs=2, group_size=1, auto_reset=True)
    env.group_size = 2  # the env constructor refuses this pair itself; the algorithm must too
    return env
