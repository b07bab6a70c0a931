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
