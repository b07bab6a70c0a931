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
