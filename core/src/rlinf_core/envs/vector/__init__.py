"""Vectorised envs: any :class:`rlinf_core.Env` run in worker processes (``vectorize(env, num_workers)``, what the RL
loop does when ``rollout.env_workers > 0``)."""

from rlinf_core.envs.vector.worker_env import WorkerEnv, vectorize
from rlinf_core.envs.vector.workers import EnvWorkerError

__all__ = ["EnvWorkerError", "WorkerEnv", "vectorize"]
