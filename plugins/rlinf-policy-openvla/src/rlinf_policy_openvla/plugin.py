"""rlinf entry point of rlinf-policy-openvla: registers OpenVLAPolicy and OpenVLAOFTPolicy."""

from rlinf_core import hookimpl


@hookimpl
def register_policies(register):
    from rlinf_policy_openvla.policy import OpenVLAOFTPolicy, OpenVLAPolicy

    register(OpenVLAPolicy)
    register(OpenVLAOFTPolicy)
