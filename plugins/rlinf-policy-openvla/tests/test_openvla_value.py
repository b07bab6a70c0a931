"""Policy.value: the critic reads the prompt prefix, so bootstrap values need no action decode."""

import pytest

from rlinf_core.testing.numerics import assert_close_reordered
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig
from rlinf_policy_openvla.testing import FLOAT32_SUMS

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _count_llm_calls(policy):
    calls = []
    original = policy.vla.run_llm

    def counted(embeds, *args, **kwargs):
        calls.append(embeds.shape[1])
        return original(embeds, *args, **kwargs)

    policy.vla.run_llm = counted
    return calls


def test_openvla_value_is_one_prefix_forward(tiny_openvla, obs):
    policy = OpenVLAPolicy(
        model_path=str(tiny_openvla),
        add_value_head=True,
        actions=ActionConfig(num_action_chunks=2),
    ).eval()
    calls = _count_llm_calls(policy)
    out = policy.act(obs, do_sample=False)
    assert len(calls) == policy.num_action_tokens  # autoregressive decode: one call per action token
    calls.clear()
    values = policy.value(obs)
    assert len(calls) == 1
    assert_close_reordered(values, out.values, *FLOAT32_SUMS)  # one pass against the rollout's


@pytest.mark.parametrize("mode,slots", [("causal", 0), ("action_block", 0), ("bidirectional", 14)])
def test_oft_value_reads_the_prefix_unless_the_prompt_sees_the_action_slots(tiny_oft, obs, mode, slots):
    policy = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        add_value_head=True,
        attention_mode=mode,
        actions=ActionConfig(num_action_chunks=2),
    ).eval()
    out = policy.act(obs, do_sample=True)
    calls = _count_llm_calls(policy)
    values = policy.value(obs)
    prefix = policy._prefix(obs)[0].shape[1]
    assert calls == [prefix + slots]
    assert_close_reordered(values, out.values, *FLOAT32_SUMS)


def test_value_without_value_head_is_one_line(tiny_oft, obs):
    policy = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        add_value_head=False,
        actions=ActionConfig(num_action_chunks=2),
    )
    with pytest.raises(ValueError, match="no value head"):
        policy.value(obs)
