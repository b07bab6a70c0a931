"""Supervised training through ``rlinf fit``: SFT of a policy on demos, world-model and reward-model training."""
