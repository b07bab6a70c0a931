"""Env helpers for plugins: the world-model env, worker processes, headless GL for MuJoCo."""

from rlinf_core.foundation.lazy import lazy_getattr

# public name -> module that defines it (imported on first use: importing this package stays cheap)
_LAZY = {
    "EnvWorkerError": "rlinf_core.envs.vector",
    "WorkerEnv": "rlinf_core.envs.vector",
    "WorldModelEnv": "rlinf_core.envs.world_model_env",
    "gl_import_error": "rlinf_core.envs.mujoco_gl",
    "setup_gl": "rlinf_core.envs.mujoco_gl",
    "vectorize": "rlinf_core.envs.vector",
}

__all__ = ["EnvWorkerError", "WorkerEnv", "WorldModelEnv", "gl_import_error", "setup_gl", "vectorize"]


__getattr__ = lazy_getattr(__name__, _LAZY)
