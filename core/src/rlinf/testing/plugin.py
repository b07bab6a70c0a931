"""Core's built-in plugin: registers the test doubles through the same hooks as any plugin."""

from rlinf.plugins.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    from rlinf.testing.toy_env import ReachEnv
    from rlinf.world_models.env import WorldModelEnv

    register(ReachEnv)
    register(WorldModelEnv)


@hookimpl
def register_policies(register):
    from rlinf.testing.toy_gaussian import TinyGaussianPolicy
    from rlinf.testing.toy_policy import TinyVLAPolicy

    register(TinyVLAPolicy)
    register(TinyGaussianPolicy)


@hookimpl
def register_world_models(register):
    from rlinf.testing.toy_world_model import ToyRewardModel, ToyWorldModel
    from rlinf.world_models.reward_models import ResnetRewardModel, TaskEmbedResnetRewardModel

    register(ToyWorldModel)
    register(ToyRewardModel)
    register(ResnetRewardModel)
    register(TaskEmbedResnetRewardModel)
