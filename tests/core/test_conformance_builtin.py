"""The built-in test doubles pass the same conformance tests as every plugin."""

from rlinf.testing.conformance import EnvPluginTests, PolicyPluginTests
from rlinf.testing.toy_env import ReachEnv
from rlinf.testing.toy_policy import TinyVLAPolicy


class TestReachEnv(EnvPluginTests):
    env_class = ReachEnv
    env_kwargs = {"image_size": 32}


class TestTinyVLAPolicy(PolicyPluginTests):
    state_dim = 4

    def make_policy(self):
        return TinyVLAPolicy(action_dim=2, num_action_chunks=3)


def test_filters_restrict_the_pool():
    env = ReachEnv(num_envs=2, task_id_filter=[1], trials_per_task=5)
    assert sorted(env.pool.tolist()) == [5, 6, 7, 8, 9]
    env = ReachEnv(num_envs=2, reset_state_id_filter=[7], is_eval=True)
    assert env.pool.tolist() == [7]
    env.reset()
    assert env.reset_state_ids.tolist() == [7, -1]
