"""What RLinf v0.3 sends to ManiSkill and how it renders: the gripper command and the camera shader."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest

from rlinf_env_maniskill import ManiSkillEnv, lavapipe
from rlinf_env_maniskill.settings import ManiSkillRenderConfig, ManiSkillSimConfig

os.environ.setdefault("OMP_NUM_THREADS", "1")


def test_bridge_gripper_is_binarized_as_rlinf_sends_it():
    """RLinf v0.3 rlinf/envs/action_utils.py:50 (widowx_bridge): ``gripper = 2.0 * (open_gripper > 0.5) - 1.0``."""
    from rlinf_env_maniskill._sim import SimBatch

    sim = SimpleNamespace(arm_normalized=False, pos_range=(-0.1, 0.1), rot_scale=-0.1)
    bins = np.linspace(0.0, 1.0, 257)
    grid = np.concatenate([bins, (bins[1:] + bins[:-1]) / 2, [0.5, np.nextafter(0.5, 1), -0.3, 1.7]])
    actions = np.zeros((len(grid), 7), np.float32)
    actions[:, 6] = grid
    ours = SimBatch.to_sim_actions(sim, actions, "bridge")[:, 6]
    rlinf = 2.0 * (actions[:, 6:7] > 0.5) - 1.0
    np.testing.assert_array_equal(ours, rlinf[:, 0])
    assert set(np.unique(ours)) == {-1.0, 1.0}
    assert ours[np.where(grid == 0.5)[0][0]] == -1.0  # strictly above 0.5 opens


needs_render = pytest.mark.skipif(
    not (lavapipe.is_installed() or lavapipe.nvidia_present() or os.environ.get("VK_ICD_FILENAMES")),
    reason=f"lavapipe is not installed (and no GPU): run {lavapipe.INSTALL_HINT}",
)


@needs_render
def test_cameras_use_the_default_shader_pack_as_rlinf_sets_it():
    """RLinf's ManiSkill env configs set ``init_params.sensor_configs.shader_pack: "default"``; ManiSkill's own
    default is "minimal"."""
    from mani_skill.render.shaders import PREBUILT_SHADER_CONFIGS

    env = ManiSkillEnv(
        num_envs=1,
        render=ManiSkillRenderConfig(image_size=32),
        trials_per_task=2,
        sim=ManiSkillSimConfig(backend="cpu"),
    )
    try:
        obs = env.reset(np.array([0]))
        u = env._sim_of(0, 0)[0].u
        config = u.scene.sensors["base_camera"].config
        assert config.shader_pack == "default"
        assert config.shader_config == PREBUILT_SHADER_CONFIGS["default"]
        assert obs.main_images.float().std() > 5
    finally:
        env.close()
    assert ManiSkillEnv(render=ManiSkillRenderConfig(shader_pack="minimal")).render.shader_pack == "minimal"
    with pytest.raises(ValueError, match="render.shader_pack must be one of"):
        ManiSkillRenderConfig(shader_pack="fancy")
