"""rlinf entry point of rlinf-policy-openpi: registers OpenPIPolicy (π0 and π0.5) by dotted path."""

from rlinf_core import hookimpl


@hookimpl
def register_policies(register):
    register("rlinf_policy_openpi.policy:OpenPIPolicy")


@hookimpl
def register_commands(register):
    register(
        "openpi-make-tiny",
        "rlinf_policy_openpi.make_tiny:main",
        "Write a tiny random π0 / π0.5 checkpoint in the released layout.",
    )
