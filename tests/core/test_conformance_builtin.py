"""The built-in test doubles pass the same conformance tests as every plugin."""

import math

import pytest
import torch

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_gaussian import TinyGaussianPolicy
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.testing.conformance import EnvPluginTests, PolicyPluginTests


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


class TestTinyGaussianPolicy(PolicyPluginTests):
    state_dim = 4

    def make_policy(self):
        return TinyGaussianPolicy(action_dim=2, num_action_chunks=3)


def test_gaussian_logprobs_are_densities_and_can_be_positive():
    policy = TinyGaussianPolicy(init_log_std=-2.0)
    obs = TestTinyGaussianPolicy().make_observation(4)
    with torch.no_grad():
        out = policy.act(obs, do_sample=True, temperature=0.5)
        ev = policy.evaluate(obs, out.record, temperature=0.5)
    std = 0.5 * math.exp(-2.0)
    assert (out.logprobs > 0).any(), "narrow Gaussians have positive log-densities"
    ref = torch.distributions.Normal(policy._mean(policy._features(obs)), std).log_prob(out.record["raw_actions"])
    torch.testing.assert_close(ev.logprobs, ref.detach())


def test_kit_refuses_overridden_test_methods():
    with pytest.raises(TypeError, match="overrides the conformance test 'test_greedy_is_deterministic'"):

        class Sneaky(PolicyPluginTests):  # noqa: F841 - creating the class is the test
            def test_greedy_is_deterministic(self):
                pass

    with pytest.raises(TypeError, match="test_reset_returns_observation"):

        class SneakyEnv(EnvPluginTests):  # noqa: F841
            test_reset_returns_observation = None


def test_tiny_policies_load_through_from_pretrained(tmp_path):
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=3, add_value_head=False)
    policy.save_pretrained(tmp_path / "tiny")
    loaded = TinyVLAPolicy.from_pretrained(tmp_path / "tiny", add_value_head=True)
    assert loaded.has_value_head and loaded.num_action_chunks == 3
    with pytest.raises(ValueError, match="tiny_vla"):
        TinyGaussianPolicy.from_pretrained(tmp_path / "tiny")
