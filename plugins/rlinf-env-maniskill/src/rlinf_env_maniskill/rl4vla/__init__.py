"""RL4VLA's PutOnPlateInScene25 task family (as RLinf v0.3 ships it), registered with ManiSkill on import.

List ``rlinf_env_maniskill.rl4vla`` in ``task_modules`` (ManiSkillEnv imports it by itself for these ids).
"""

from rlinf_env_maniskill.rl4vla import tasks, variants_multi, variants_vision  # noqa: F401  (registers the ids)
from rlinf_env_maniskill.rl4vla.scene import PutOnPlateInScene25

__all__ = ["PutOnPlateInScene25", "tasks", "variants_multi", "variants_vision"]
