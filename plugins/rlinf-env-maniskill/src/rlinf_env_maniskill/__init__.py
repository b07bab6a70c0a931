"""ManiSkill3 environments for rlinf (CPU via Mesa lavapipe, or GPU)."""

from rlinf_env_maniskill.env import ManiSkillEnv

__all__ = ["ManiSkillEnv"]
__version__ = "0.1.0"
