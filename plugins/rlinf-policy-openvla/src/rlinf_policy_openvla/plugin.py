"""rlinf entry point of rlinf-policy-openvla: registers OpenVLAPolicy and OpenVLAOFTPolicy by dotted path."""

from rlinf_core import hookimpl


@hookimpl
def register_policies(register):
    register("rlinf_policy_openvla.policy:OpenVLAPolicy")
    register("rlinf_policy_openvla.oft_policy:OpenVLAOFTPolicy")


@hookimpl
def register_commands(register):
    register(
        "openvla-make-tiny",
        "rlinf_policy_openvla.make_tiny:main",
        "Write a tiny random OpenVLA(-OFT) checkpoint in the released layout.",
    )
