"""The core world-model adapter on the toy world model and reward model."""

import numpy as np
import torch

from rlinf_core.builtin.toy_world_model import ToyRewardModel, ToyWorldModel
from rlinf_core.envs.vector import vectorize
from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.testing.conformance import EnvPluginTests


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
        np.save(
            root / f"traj{i}.npy", np.array([{"image": img, "instruction": "centre"}], dtype=object), allow_pickle=True
        )
    env = WorldModelEnv(
        world_model=ToyWorldModel(),
        reward_model=ToyRewardModel(patch=2),
        init_data_path=str(root),
        num_envs=2,
        auto_reset=True,
        max_episode_steps=50,
        is_eval=False,
    )
    env.reset(reset_state_ids=np.array([0, 1]))
    out = env.chunk_step(torch.zeros(2, 3, 2))
    assert out.terminations[0, 0] and out.rewards[0].sum() == 1.0
    assert not out.terminations[1].any() and out.valid[1].all()
    # env 1 was not reset: its episode continues, env 0 started a new one
    assert env._episodes[1].length == 3 and env._episodes[0].length == 0
    assert env.pop_episodes()[0]["success_once"] == 1.0


# ---------------------------------------------------------------------------------------------
# the world-model contract: condition frames, instructions, device, init-data format, plugin kits
# ---------------------------------------------------------------------------------------------
import pytest  # noqa: E402

from rlinf_core.contracts.world_model import ConditionSpec  # noqa: E402
from rlinf_core.testing.world_model_conformance import RewardModelPluginTests, WorldModelPluginTests  # noqa: E402
from rlinf_core.world_models.init_data import condition_inputs, load_init_trajectory, save_init_trajectory  # noqa: E402


class TestToyWorldModelKit(WorldModelPluginTests):
    model_class = ToyWorldModel
    image_size = 16
    pretrained_overrides = {"pixels_per_unit": 3.0}


class TestWanLikeToyWorldModelKit(WorldModelPluginTests):
    model_class = ToyWorldModel
    image_size = 16
    pretrained_overrides = {"pixels_per_unit": 2.5}

    def make_model(self):
        return ToyWorldModel(action_dim=7, num_condition_frames=5, condition_frames="first_and_last", pad_gripper=-1.0)


class TestToyRewardModelKit(RewardModelPluginTests):
    model_class = ToyRewardModel
    image_size = 16


def _frames(n, size=8):
    return np.stack([np.full((size, size, 3), 10 * (i + 1), np.uint8) for i in range(n)])


def test_released_format_round_trip(tmp_path):
    acts = np.arange(14, dtype=np.float32).reshape(2, 7)
    path = save_init_trajectory(tmp_path / "dataset" / "traj0_kir.npy", _frames(2), "put the bowl", acts)
    raw = np.load(path, allow_pickle=True)
    assert raw.dtype == object and raw.ndim == 1 and set(raw[0]) == {"image", "delta_action", "instruction"}
    traj = load_init_trajectory(path)
    assert traj[1]["instruction"] == "put the bowl" and np.array_equal(traj[1]["delta_action"], acts[1])
    with pytest.raises(ValueError, match="uint8 \\[T, H, W, 3\\]"):
        save_init_trajectory(tmp_path / "bad.npy", np.zeros((2, 8, 8), np.float32), "x")


def test_opensora_like_condition_repeats_frame_zero():
    traj = [{"image": f, "delta_action": np.ones(7, np.float32)} for f in _frames(6)]
    frames, actions = condition_inputs(traj, ConditionSpec(4), action_dim=7)
    assert frames.shape == (4, 8, 8, 3) and (frames == traj[0]["image"]).all()
    assert not actions.any()


def test_wan_like_condition_takes_frame_zero_and_the_last_four_frames_of_a_keyframe_file():
    spec = ConditionSpec(5, "first_and_last", pad_gripper=-1.0)
    kir = [{"image": f, "delta_action": np.full(7, i, np.float32)} for i, f in enumerate(_frames(7))]
    frames, actions = condition_inputs(kir, spec, action_dim=7)
    assert [int(f[0, 0, 0]) for f in frames] == [10, 40, 50, 60, 70]
    assert actions[0].tolist() == [0.0] * 6 + [-1.0] and actions[1:, 0].tolist() == [3.0, 4.0, 5.0, 6.0]
    plain = kir[:1]  # a traj*.npy with the initial frame only: frame 0 everywhere, zero / gripper -1 actions
    frames, actions = condition_inputs(plain, spec, action_dim=7)
    assert (frames == kir[0]["image"]).all() and (actions[:, -1] == -1).all() and not actions[:, :-1].any()
    # upstream's last_n_frames: a file of exactly 4 frames fills slots 1-4 with its frames 0-3 (and their actions)
    frames, actions = condition_inputs(kir[:4], spec, action_dim=7)
    assert [int(f[0, 0, 0]) for f in frames] == [10, 10, 20, 30, 40] and actions[1:, 0].tolist() == [0, 1, 2, 3]
    frames, actions = condition_inputs(kir[:3], spec, action_dim=7)  # fewer: frame 0 everywhere
    assert (frames == kir[0]["image"]).all() and (actions[:, -1] == -1).all()


class _RecordingRewardModel(ToyRewardModel):
    def success_prob(self, frames, instructions=None):
        self.seen = list(instructions)
        return super().success_prob(frames, instructions)


def test_instructions_reach_the_reward_model_and_workers_are_refused(tmp_path):
    root = write_init_data(tmp_path / "init", n=2)
    rm = _RecordingRewardModel()
    env = WorldModelEnv(ToyWorldModel(), rm, str(root), num_envs=2, max_episode_steps=5)
    env.reset(reset_state_ids=np.array([1, 0]))
    env.chunk_step(torch.zeros(2, 3, 2))
    assert rm.seen == ["centre the dot 1"] * 3 + ["centre the dot 0"] * 3
    with pytest.raises(ValueError, match="rollout.env_workers: 0"):
        vectorize(WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(root), num_envs=2), 1)


def test_rl_module_sets_the_env_device_before_rollouts(tmp_path, monkeypatch):
    import lightning.pytorch as pl

    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.rl.algorithms.grpo import GRPO
    from rlinf_core.rl.config import RolloutConfig
    from rlinf_core.rl.module import RLModule

    calls = []
    original = WorldModelEnv.set_device
    monkeypatch.setattr(WorldModelEnv, "set_device", lambda self, d: (calls.append(str(d)), original(self, d))[1])
    root = write_init_data(tmp_path / "init", n=4)
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(root), num_envs=4, group_size=2, max_episode_steps=4)
    module = RLModule(env=env, policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2, state_dim=0),
                      algorithm=GRPO(), global_batch_size=8, micro_batch_size=8,
                      rollout=RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False))  # fmt: skip
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         check_val_every_n_epoch=1, default_root_dir=str(tmp_path))  # fmt: skip
    calls.clear()
    trainer.fit(module)
    assert calls[:1] == ["cpu"] and len(calls) >= 2  # the training env at fit start, the eval env before eval


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_frames_and_models_stay_on_the_device(tmp_path):
    root = write_init_data(tmp_path / "init", n=2)
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(root), num_envs=2, device="cuda")
    obs = env.reset()
    assert obs.main_images.device.type == "cuda" and next(env.world_model.parameters()).is_cuda
    out = env.chunk_step(torch.zeros(2, 3, 2))
    assert out.obs.main_images.device.type == "cuda"
    env.set_device("cpu")
    assert env.chunk_step(torch.zeros(2, 3, 2)).obs.main_images.device.type == "cpu"


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
        world_model=_DivergingWorldModel(),
        reward_model=ToyRewardModel(patch=2),
        init_data_path=str(root),
        num_envs=2,
        auto_reset=False,
        max_episode_steps=50,
        is_eval=False,
    )
    env.reset(reset_state_ids=np.array([0, 1]))
    out = env.chunk_step(torch.zeros(2, 3, 2))
    assert out.terminations[1, 0] and out.rewards[1].sum() == 0 and not out.valid[1, 1:].any()
    assert torch.isfinite(out.obs.main_images.float()).all(), "the policy never sees a NaN frame"
    assert not out.terminations[0].any(), "the other sub-env runs on"
    assert env.pop_metrics() == {"env/non_finite_episodes": 1.0} and env.pop_metrics()["env/non_finite_episodes"] == 0


def test_relative_reward_pays_once_and_never_goes_negative_when_episodes_run_on(tmp_path):
    """With ``ignore_terminations`` an episode continues past its first success; frames that fall back
    under the threshold (the dot moved off centre) must not be charged ``-reward_coef``."""
    root = tmp_path / "init"
    root.mkdir()
    img = np.zeros((16, 16, 3), np.uint8)
    img[7:10, 7:10] = 255  # centred: success from the first predicted frame
    np.save(root / "traj0.npy", np.array([{"image": img, "instruction": "centre"}], dtype=object), allow_pickle=True)
    env = WorldModelEnv(
        world_model=ToyWorldModel(),
        reward_model=ToyRewardModel(patch=2),
        init_data_path=str(root),
        reward_coef=5.0,
        num_envs=1,
        auto_reset=False,
        ignore_terminations=True,
        max_episode_steps=50,
        is_eval=False,
    )
    env.reset(reset_state_ids=np.array([0]))
    first = env.chunk_step(torch.zeros(1, 3, 2))
    away = env.chunk_step(torch.full((1, 3, 2), 2.0))  # the dot leaves the centre: success indicator drops to 0
    back = env.chunk_step(torch.full((1, 3, 2), -2.0))
    rewards = torch.cat([first.rewards, away.rewards, back.rewards], 1)
    assert float(first.rewards[0, 0]) == 5.0
    assert (rewards >= 0).all() and float(rewards.sum()) == 5.0


def write_tasks(root, instructions):
    """One init file per instruction (a dot at a seeded spot), in the released format."""
    from rlinf_core.world_models.init_data import save_init_trajectory

    rng = np.random.default_rng(1)
    for i, text in enumerate(instructions):
        img = np.zeros((1, 16, 16, 3), np.uint8)
        x, y = rng.integers(2, 14, size=2)
        img[0, y - 1 : y + 2, x - 1 : x + 2] = 255
        save_init_trajectory(root / f"traj{i:02d}.npy", img, text, np.zeros((1, 2)))
    return root


def test_distinct_instructions_are_distinct_tasks(tmp_path):
    texts = ["push left", "push right", "push left", " push up ", "push right", "push up"]
    root = write_tasks(tmp_path / "init", texts)
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(root), num_envs=2, max_episode_steps=4)
    assert env.task_names == ["push left", "push right", "push up"]  # first appearance in file order, stripped
    assert env.task_ids(np.arange(6)).tolist() == [0, 1, 0, 2, 1, 2]
    only = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(root), num_envs=2, max_episode_steps=4,
                         is_eval=True, task_id_filter=[1])  # fmt: skip
    obs = only.reset()
    assert obs.task_descriptions == ["push right", "push right"]  # the eval grid of task 1: files 1 and 4
    for _ in range(2):
        only.chunk_step(torch.zeros(2, 2, 2))
    records = only.pop_episodes()
    assert sorted(r["reset_state_id"] for r in records) == [1, 4] and {r["task_id"] for r in records} == {1}


def test_grpo_scales_by_instruction_task_in_a_world_model_env(tmp_path):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.rl.algorithms.grpo import GRPO

    root = write_tasks(tmp_path / "init", ["push left", "push right"] * 2)
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(root), num_envs=4, group_size=2, max_episode_steps=4)
    algorithm = GRPO(scale_rewards="task")
    algorithm.check(env, TinyVLAPolicy(action_dim=2, num_action_chunks=2, state_dim=0, add_value_head=False))
    assert algorithm._num_tasks == 2 and algorithm._task_of(np.array([0, 1, 2, 3])).tolist() == [0, 1, 0, 1]


class _ClipWitness(ToyWorldModel):
    """A toy world model whose state is a dict holding a tuple, recording the actions it is given."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def init_state(self, frames, actions):
        return {"frame": frames[:, -1].clone(), "steps": (torch.zeros(len(frames), dtype=torch.long),)}

    def predict(self, state, actions, generator=None):
        self.seen.append(actions.clone())
        frames, last = super().predict(state["frame"], actions, generator)
        return frames, {"frame": last, "steps": (state["steps"][0] + actions.shape[1],)}

    def select(self, state, env_ids):
        return {"frame": state["frame"][env_ids], "steps": (state["steps"][0][env_ids],)}

    def assign(self, state, env_ids, new):
        frame, steps = state["frame"].clone(), state["steps"][0].clone()
        frame[env_ids], steps[env_ids] = new["frame"], new["steps"][0]
        return {"frame": frame, "steps": (steps,)}


def test_actions_reach_the_world_model_unclipped_and_a_dict_state_works(tmp_path):
    root = write_init_data(tmp_path / "init", n=2)
    model = _ClipWitness()
    env = WorldModelEnv(model, ToyRewardModel(), str(root), num_envs=2, auto_reset=True, max_episode_steps=4)
    env.reset()
    actions = torch.tensor([[[1.7, -3.0], [0.25, 0.5]], [[-1.5, 0.0], [2.0, 2.0]]])
    env.chunk_step(actions)
    assert model.seen[0].dtype == torch.float32 and torch.equal(model.seen[0], actions)  # env scale, as given
    env.set_device("cpu")
    env.chunk_step(actions)  # the second chunk ends both episodes (4 steps): auto-reset assigns fresh rows
    assert env._state["steps"][0].tolist() == [0, 0]
    env.chunk_step(actions)
    assert env._state["steps"][0].tolist() == [2, 2]


def test_a_relative_init_data_path_is_read_from_the_working_directory_then_beside_the_config_files(
    tmp_path, monkeypatch
):
    from rlinf_core.foundation import config_paths

    shipped = write_tasks(tmp_path / "plugin" / "configs" / "demo" / "init_states", ["a"])
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(config_paths, "_CONFIG_DIRS", [])
    config_paths.set_config_files([tmp_path / "mine.yaml", shipped.parent / "grpo.yaml"])
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), "init_states", num_envs=1)
    assert env.init_data_path == str(shipped)  # found beside the second config
    write_tasks(elsewhere / "init_states", ["b"])
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), "init_states", num_envs=1)
    assert env.init_data_path == str(elsewhere / "init_states") and env.task_names == ["b"]  # the working dir wins
    missing = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), "nowhere", num_envs=1)  # read only when used
    with pytest.raises(FileNotFoundError) as caught:
        missing.check_inputs()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("WorldModelEnv init_data_path 'nowhere' is not a directory")
    for place in (elsewhere / "nowhere", tmp_path / "nowhere", shipped.parent / "nowhere"):
        assert str(place) in message
    (elsewhere / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no traj"):
        WorldModelEnv(ToyWorldModel(), ToyRewardModel(), "empty", num_envs=1).reset()


def test_rlinf_fit_names_a_missing_init_data_path_in_one_line_before_training(tmp_path, monkeypatch, capsys):
    from rlinf_core.cli.main import main

    monkeypatch.chdir(tmp_path)
    missing = "--model.init_args.env.init_args.init_data_path=nowhere"
    with pytest.raises(SystemExit):
        main(["fit", "--config", "toy/grpo_in_world_model.yaml", missing, "--trainer.max_epochs=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rlinf: error: FileNotFoundError: WorldModelEnv init_data_path 'nowhere' is not a "
                              f"directory: looked at {tmp_path / 'nowhere'}, "), err[-1]  # fmt: skip
    assert not (tmp_path / "runs" / "grpo_in_world_model" / "version_0" / "checkpoints").exists()
