"""Core's built-in plugin: registers the test doubles through the same hooks as any plugin."""

from rlinf.plugins.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    from rlinf.testing.toy_env import ReachEnv

    register(ReachEnv)


@hookimpl
def register_policies(register):
    from rlinf.testing.toy_policy import TinyVLAPolicy

    register(TinyVLAPolicy)
