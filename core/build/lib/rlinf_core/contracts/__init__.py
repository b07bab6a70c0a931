"""The contracts plugins implement: observations, envs, policies, world models and reward models."""
