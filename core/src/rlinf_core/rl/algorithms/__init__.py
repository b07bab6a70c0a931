"""RL algorithms: pure advantage/loss functions and the PPO / GRPO update rules."""

from rlinf_core.rl.algorithms.base import Algorithm
from rlinf_core.rl.algorithms.grpo import GRPO
from rlinf_core.rl.algorithms.ppo import PPO

__all__ = ["GRPO", "PPO", "Algorithm"]
