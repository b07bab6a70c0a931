"""rlinf entry point of rlinf-policy-openpi: registers OpenPIPolicy (π0 and π0.5)."""

from rlinf_core import hookimpl


@hookimpl
def register_policies(register):
    from rlinf_policy_openpi.policy import OpenPIPolicy

    register(OpenPIPolicy)
