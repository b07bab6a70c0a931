"""Core's built-in plugin: registers the test doubles and the remote policy through the same hooks as any plugin (by
dotted path: nothing is imported until a config uses it)."""

from rlinf_core.plugins.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    register("rlinf_core.builtin.toy_env:ReachEnv")
    register("rlinf_core.envs.world_model_env:WorldModelEnv")


@hookimpl
def register_policies(register):
    register("rlinf_core.builtin.toy_policy:TinyVLAPolicy")
    register("rlinf_core.builtin.toy_gaussian:TinyGaussianPolicy")
    register("rlinf_core.remote.policy:RemotePolicy")


@hookimpl
def register_world_models(register):
    register("rlinf_core.builtin.toy_world_model:ToyWorldModel")
    register("rlinf_core.builtin.toy_world_model:ToyRewardModel")
    register("rlinf_core.world_models.reward_models:ResnetRewardModel")
    register("rlinf_core.world_models.reward_models:TaskEmbedResnetRewardModel")
