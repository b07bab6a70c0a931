"""RL algorithms: pure advantage/loss functions and the PPO / GRPO update rules."""

from rlinf.algorithms.base import Algorithm, Reducer
from rlinf.algorithms.grpo import GRPO
from rlinf.algorithms.ppo import PPO

__all__ = ["GRPO", "PPO", "Algorithm", "Reducer"]
