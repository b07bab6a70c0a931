"""Both policies pass rlinf's standard policy conformance tests (on tiny real-layout checkpoints)."""

from rlinf_core.models.lora import LoRAConfig
from rlinf_core.testing.conformance import PolicyPluginTests
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig, InputConfig
from rlinf_policy_openvla.testing import tiny_checkpoint


class TestOpenVLAOFTPolicy(PolicyPluginTests):
    def make_policy(self):
        return OpenVLAOFTPolicy(
            model_path=str(tiny_checkpoint(kind="oft")),
            add_value_head=True,
            actions=ActionConfig(num_action_chunks=3),
        )


class TestOpenVLAOFTCausalLoRA(PolicyPluginTests):
    state_dim = 8

    def make_policy(self):
        return OpenVLAOFTPolicy(
            model_path=str(tiny_checkpoint(kind="oft", proprio_dim=8)),
            attention_mode="causal",
            add_value_head=True,
            value_type="action_level",
            lora=LoRAConfig(rank=4),
            actions=ActionConfig(num_action_chunks=2),
            inputs=InputConfig(use_proprio=True),
        )


class TestOpenVLAPolicy(PolicyPluginTests):
    def make_policy(self):
        return OpenVLAPolicy(model_path=str(tiny_checkpoint(kind="openvla")), add_value_head=True)
