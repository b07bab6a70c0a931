"""Entry point of the ``metaworld`` rlinf plugin."""

from rlinf_core import hookimpl


@hookimpl
def register_envs(register):
    from rlinf_env_metaworld.env import MetaWorldEnv

    register(MetaWorldEnv)
