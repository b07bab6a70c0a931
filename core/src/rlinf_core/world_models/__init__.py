"""World-model helpers for plugins: initial-state data, conditioning, reward models."""

from rlinf_core.foundation.lazy import lazy_getattr

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "ConditionSpec": "rlinf_core.contracts.world_model",
    "LIBERO_TASKS": "rlinf_core.world_models.reward_models",
    "ResnetRewardModel": "rlinf_core.world_models.reward_models",
    "TaskEmbedResnetRewardModel": "rlinf_core.world_models.reward_models",
    "UPSTREAM_SUCCESS_THRESHOLD": "rlinf_core.world_models.reward_models",
    "condition_inputs": "rlinf_core.world_models.init_data",
    "instruction_of": "rlinf_core.world_models.init_data",
    "load_init_trajectory": "rlinf_core.world_models.init_data",
    "save_init_trajectory": "rlinf_core.world_models.init_data",
}

__all__ = [
    "ConditionSpec",
    "LIBERO_TASKS",
    "ResnetRewardModel",
    "TaskEmbedResnetRewardModel",
    "UPSTREAM_SUCCESS_THRESHOLD",
    "condition_inputs",
    "instruction_of",
    "load_init_trajectory",
    "save_init_trajectory",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
