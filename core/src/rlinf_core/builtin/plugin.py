"""Core's built-in plugin: registers the test doubles through the same hooks as any plugin."""

from rlinf_core.plugins.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    from rlinf_core.builtin.toy_env import ReachEnv
    from rlinf_core.envs.world_model import WorldModelEnv

    register(ReachEnv)
    register(WorldModelEnv)


@hookimpl
def register_policies(register):
    from rlinf_core.builtin.toy_gaussian import TinyGaussianPolicy
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    register(TinyVLAPolicy)
    register(TinyGaussianPolicy)


@hookimpl
def register_world_models(register):
    from rlinf_core.builtin.toy_world_model import ToyRewardModel, ToyWorldModel
    from rlinf_core.world_models.reward_models import ResnetRewardModel, TaskEmbedResnetRewardModel

    register(ToyWorldModel)
    register(ToyRewardModel)
    register(ResnetRewardModel)
    register(TaskEmbedResnetRewardModel)
