"""Entry-point module of rlinf-env-maniskill (``[project.entry-points.rlinf] maniskill``)."""

from rlinf_core.plugins.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    from rlinf_env_maniskill.env import ManiSkillEnv

    register(ManiSkillEnv)
