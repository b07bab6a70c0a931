"""LiberoEnv in rlinf's env worker processes: one simulator set per process, errors surface with their cause."""

import os
import tempfile

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

import pytest  # noqa: E402
import torch  # noqa: E402

from rlinf_core.envs.vector import EnvWorkerError, vectorize  # noqa: E402
from rlinf_env_libero import LiberoEnv  # noqa: E402
from rlinf_env_libero.settings import LiberoRenderConfig, LiberoSimConfig  # noqa: E402

pytestmark = pytest.mark.slow


def test_runs_in_worker_processes_and_reports_simulator_errors():
    env = vectorize(
        LiberoEnv(
            num_envs=2,
            render=LiberoRenderConfig(image_size=32, fast_render=True),
            sim=LiberoSimConfig(settle_steps=1),
            task_id_filter=[0],
            trials_per_task=2,
            is_eval=True,
            auto_reset=True,
            ignore_terminations=True,
            max_episode_steps=4,
        ),
        num_workers=2,
    )
    try:
        obs = env.reset()
        assert obs.main_images.shape == (2, 32, 32, 3) and obs.main_images.float().std() > 0
        assert sorted(env.reset_state_ids.tolist()) == [0, 1], "the workers split the eval pool"
        out = env.chunk_step(torch.zeros(2, 2, 7))
        assert out.valid.all() and out.obs.states.shape == (2, 8)
        bad = torch.zeros(2, 2, 7)
        bad[1, 0, 0] = float("nan")
        with pytest.raises(EnvWorkerError, match="non-finite actions"):
            env.chunk_step(bad)
    finally:
        env.close()
