"""Vectorised envs: any :class:`rlinf_core.Env` run in worker processes (``num_workers > 0``)."""

from rlinf_core.envs.vector.worker_env import WorkerEnv, vectorize
from rlinf_core.envs.vector.workers import EnvWorkerError

__all__ = ["EnvWorkerError", "WorkerEnv", "vectorize"]
