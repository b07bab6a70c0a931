"""rlinf: reinforcement-learning fine-tuning of Vision-Language-Action policies on Lightning."""

from rlinf.envs.base import ChunkStepResult, Env, VideoConfig
from rlinf.envs.observation import Observation
from rlinf.plugins.hookspecs import hookimpl
from rlinf.policies.base import ActOutput, EvaluateOutput, Policy
from rlinf.world_models.base import RewardModel, WorldModel

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
        from rlinf.module import RLModule

        return RLModule
    if name in ("PPO", "GRPO"):
        import rlinf.algorithms as algorithms

        return getattr(algorithms, name)
    raise AttributeError(f"module 'rlinf' has no attribute {name!r}")
