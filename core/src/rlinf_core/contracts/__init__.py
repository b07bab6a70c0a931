"""The plugin contracts: what an env, a policy, a world model and a reward model implement, and what callbacks read
of the RL loop."""

from rlinf_core.foundation.lazy import lazy_getattr

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "ActOutput": "rlinf_core.contracts.policy",
    "BatchedEnv": "rlinf_core.contracts.batched_env",
    "ChunkStepResult": "rlinf_core.contracts.observation",
    "ConditionSpec": "rlinf_core.contracts.world_model",
    "Env": "rlinf_core.contracts.env",
    "EvaluateOutput": "rlinf_core.contracts.policy",
    "MemoryProfile": "rlinf_core.memory.estimate",
    "Observation": "rlinf_core.contracts.observation",
    "Policy": "rlinf_core.contracts.policy",
    "RLLoop": "rlinf_core.contracts.rl_loop",
    "RewardModel": "rlinf_core.contracts.world_model",
    "Stack": "rlinf_core.memory.estimate",
    "StepResult": "rlinf_core.contracts.observation",
    "VideoConfig": "rlinf_core.contracts.batched_env",
    "WorldModel": "rlinf_core.contracts.world_model",
    "WorldModelMemory": "rlinf_core.memory.meta_peak",
    "module_bytes": "rlinf_core.memory.meta_peak",
    "peak_bytes": "rlinf_core.memory.meta_peak",
}

__all__ = [
    "ActOutput",
    "BatchedEnv",
    "ChunkStepResult",
    "ConditionSpec",
    "Env",
    "EvaluateOutput",
    "MemoryProfile",
    "Observation",
    "Policy",
    "RLLoop",
    "RewardModel",
    "Stack",
    "StepResult",
    "VideoConfig",
    "WorldModel",
    "WorldModelMemory",
    "module_bytes",
    "peak_bytes",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
