"""rlinf-env-metaworld: MetaWorld (MT1 / MT10 / MT50 / ML45) for rlinf, plus scripted-expert demos."""

from rlinf_env_metaworld.env import MetaWorldEnv
from rlinf_env_metaworld.tasks import DIFFICULTY, INSTRUCTIONS, ML45_TEST, ML45_TRAIN, MT10, MT50

__all__ = ["DIFFICULTY", "INSTRUCTIONS", "ML45_TEST", "ML45_TRAIN", "MT10", "MT50", "MetaWorldEnv"]
