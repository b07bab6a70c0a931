"""rlinf: reinforcement-learning fine-tuning of Vision-Language-Action policies on Lightning."""

from rlinf_core.contracts.env import ChunkStepResult, Env, VideoConfig
from rlinf_core.contracts.observation import Observation
from rlinf_core.plugins.hookspecs import hookimpl
from rlinf_core.contracts.policy import ActOutput, EvaluateOutput, Policy
from rlinf_core.contracts.world_model import RewardModel, WorldModel

__all__ = [
    "ActOutput",
    "ChunkStepResult",
    "Env",
    "EvaluateOutput",
    "Observation",
    "Policy",
    "RewardModel",
    "VideoConfig",
    "WorldModel",
    "hookimpl",
]


def __getattr__(name: str):
    # heavy (Lightning) parts are imported on first use, so `rlinf plugins` stays fast
    if name == "RLModule":
        from rlinf_core.rl.module import RLModule

        return RLModule
    if name in ("PPO", "GRPO"):
        import rlinf_core.rl.algorithms as algorithms

        return getattr(algorithms, name)
    raise AttributeError(f"module 'rlinf' has no attribute {name!r}")
