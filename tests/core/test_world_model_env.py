"""The core world-model adapter on the toy world model and reward model."""

import numpy as np
import torch

from rlinf.testing.conformance import EnvPluginTests
from rlinf.testing.toy_world_model import ToyRewardModel, ToyWorldModel
from rlinf.world_models.env import WorldModelEnv


def write_init_data(root, n=6, size=16):
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        img = np.zeros((size, size, 3), np.uint8)
        x, y = rng.integers(2, size - 2, size=2)
        img[y - 1 : y + 2, x - 1 : x + 2] = 255
        frames = [{"image": img, "delta_action": np.zeros(2, np.float32), "instruction": f"centre the dot {i}"}]
        np.save(root / f"traj{i}.npy", np.array(frames, dtype=object), allow_pickle=True)
    return root


class TestWorldModelEnv(EnvPluginTests):
    env_class = WorldModelEnv

    def make_env(self, **overrides):
        import tempfile
        from pathlib import Path

        root = write_init_data(Path(tempfile.mkdtemp()) / "init")
        return WorldModelEnv(
            world_model=ToyWorldModel(), reward_model=ToyRewardModel(), init_data_path=str(root), **overrides
        )


def test_success_is_detected_by_the_reward_model_and_only_finished_envs_reset(tmp_path):
    root = tmp_path / "init"
    root.mkdir()
    size = 16
    for i, (x, y) in enumerate([(8, 8), (2, 2)]):  # env 0 starts centred, env 1 does not
        img = np.zeros((size, size, 3), np.uint8)
        img[y - 1 : y + 2, x - 1 : x + 2] = 255
        np.save(root / f"traj{i}.npy", np.array([{"image": img, "instruction": "centre"}], dtype=object), allow_pickle=True)
    env = WorldModelEnv(
        world_model=ToyWorldModel(), reward_model=ToyRewardModel(patch=2), init_data_path=str(root),
        num_envs=2, auto_reset=True, max_episode_steps=50, is_eval=False,
    )
    env.reset(reset_state_ids=np.array([0, 1]))
    out = env.chunk_step(torch.zeros(2, 3, 2))
    assert out.terminations[0, 0] and out.rewards[0].sum() == 1.0
    assert not out.terminations[1].any() and out.valid[1].all()
    # env 1 was not reset: its episode continues, env 0 started a new one
    assert env._episodes[1].length == 3 and env._episodes[0].length == 0
    assert env.pop_episodes()[0]["success_once"] == 1.0


class _DivergingWorldModel(ToyWorldModel):
    """Fault injection: float frames, NaN for sub-env 1 (as a diverged video model would produce)."""

    def predict(self, state, actions, generator=None):
        frames, state = super().predict(state, actions, generator)
        frames = frames.float()
        frames[1] = float("nan")
        return frames, state


def test_nan_frames_end_the_episode_without_reward_and_are_counted(tmp_path):
    root = write_init_data(tmp_path / "init", n=2)
    env = WorldModelEnv(
        world_model=_DivergingWorldModel(), reward_model=ToyRewardModel(patch=2), init_data_path=str(root),
        num_envs=2, auto_reset=False, max_episode_steps=50, is_eval=False,
    )
    env.reset(reset_state_ids=np.array([0, 1]))
    out = env.chunk_step(torch.zeros(2, 3, 2))
    assert out.terminations[1, 0] and out.rewards[1].sum() == 0 and not out.valid[1, 1:].any()
    assert torch.isfinite(out.obs.main_images.float()).all(), "the policy never sees a NaN frame"
    assert not out.terminations[0].any(), "the other sub-env runs on"
    assert env.pop_metrics() == {"env/non_finite_episodes": 1.0} and env.pop_metrics()["env/non_finite_episodes"] == 0
