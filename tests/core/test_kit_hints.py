"""The policy kit explains a policy that reads states the kit's observations do not carry (the setting to set),
and leaves other failures as they are."""

import pytest
import torch

from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.testing.conformance import PolicyPluginTests


class _NoStatesKit(PolicyPluginTests):  # not collected: run by hand below
    image_size = 16

    def make_policy(self):
        return TinyVLAPolicy(state_dim=4, add_value_head=True)


class _StatesKit(_NoStatesKit):
    state_dim = 4


def test_a_policy_reading_states_the_kit_left_empty_is_told_which_setting_fixes_it():
    with pytest.raises(AssertionError) as caught:
        _NoStatesKit().test_act_shapes()
    msg = str(caught.value)
    assert "the policy read Observation.states, which the kit's observations leave None (state_dim = None)" in msg
    assert "set `state_dim = S` on _NoStatesKit" in msg and "reads image_size, state_dim, batch_size" in msg
    assert isinstance(caught.value.__cause__, ValueError)  # the policy's own error stays chained
    _StatesKit().test_act_shapes()
    _StatesKit().test_recompute_equals_rollout_logprobs()


def test_other_failures_are_left_as_they_are():
    class Broken(TinyVLAPolicy):
        def act(self, obs, *, do_sample=True, temperature=1.0):
            raise RuntimeError("planted")

    class _Kit(_StatesKit):
        def make_policy(self):
            return Broken(state_dim=4)

    with pytest.raises(RuntimeError, match="planted"):
        _Kit().test_act_shapes()


def test_a_policy_that_checks_for_states_without_failing_passes():
    class Optional(TinyVLAPolicy):
        def act(self, obs, **kw):
            assert obs.states is None
            return super().act(
                obs.__class__(
                    main_images=obs.main_images,
                    task_descriptions=obs.task_descriptions,
                    states=torch.zeros(len(obs), 4),
                ),
                **kw,
            )

    class _Kit(_NoStatesKit):
        def make_policy(self):
            return Optional(state_dim=4)

    _Kit().test_act_shapes()
