"""Entry-point module of rlinf-env-maniskill (``[project.entry-points.rlinf] maniskill``)."""

from rlinf_core import hookimpl


@hookimpl
def register_envs(register):
    register("rlinf_env_maniskill.env:ManiSkillEnv")


@hookimpl
def register_commands(register):
    register(
        "maniskill-lavapipe",
        "rlinf_env_maniskill.lavapipe:main",
        "Install or inspect the CPU Vulkan driver (Mesa lavapipe) ManiSkill3 renders with.",
    )
    register(
        "maniskill-assets",
        "rlinf_env_maniskill.assets_cli:main",
        "Check an asset directory of the PutOnPlateInScene25 tasks, or write synthetic stand-ins.",
    )
