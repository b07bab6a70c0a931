"""World-model fine-tuning and reward-classifier training through the real ``rlinf fit`` CLI, and their exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlinf_core.builtin.toy_world_model import ToyRewardModel, ToyWorldModel
from rlinf_core.cli.main import main
from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.run.checkpoint_files import load_safetensors
from rlinf_core.supervised.world_model_trainers import RewardModelTrainer, WorldModelTrainer
from rlinf_core.world_models.init_data import save_init_trajectory
from rlinf_core.world_models.reward_models import ResnetRewardModel, TaskEmbedResnetRewardModel, load_reward_model

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_checkpointing=false"]


def dimming_world(tmp_path, episodes=6, T=10, size=16, gain=0.8):
    """Episodes of a 'true' toy world that shifts the frame by the action and dims it by ``gain`` per step."""
    truth = ToyWorldModel()
    with torch.no_grad():
        truth.mix.weight.mul_(gain)
    rng = np.random.default_rng(0)
    root = tmp_path / "episodes"
    for e in range(episodes):
        frame = torch.from_numpy(rng.integers(60, 256, (1, size, size, 3), dtype=np.uint8))
        frames, actions = [frame[0]], [np.zeros(2, np.float32)]
        for _ in range(T - 1):
            a = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size=(1, 1, 2)).astype(np.float32)
            with torch.no_grad():
                out, frame = truth.predict(frame, torch.from_numpy(a))
            frames.append(out[0, 0])
            actions.append(a[0, 0])
        success = np.arange(T) >= T - 3
        images = torch.stack(frames).numpy()
        save_init_trajectory(root / f"traj{e}.npy", images, f"task {e}", np.stack(actions), success)
    return root


def test_world_model_trainer_learns_through_rlinf_fit_and_its_export_loads_back(tmp_path):
    data = dimming_world(tmp_path)
    main(["fit", "--config", str(ROOT / "configs/toy/world_model_fit.yaml"), f"--model.init_args.data_path={data}",
          f"--trainer.logger.init_args.save_dir={tmp_path}", f"--model.init_args.cache_dir={tmp_path / 'cache'}",
          *QUIET])  # fmt: skip
    assert len(list((tmp_path / "cache").iterdir())) == 6  # one memory-mapped entry per episode
    export = next(tmp_path.glob("toy_world_model/version_*")) / "world_model"
    loaded = ToyWorldModel(model_path=str(export))
    saved = load_safetensors(export / "model.safetensors")
    state = loaded.state_dict()
    assert set(saved) == set(state) and all(torch.equal(saved[k], v) for k, v in state.items())
    diag = loaded.mix.weight.detach().view(3, 3).diagonal()
    assert (diag - 0.8).abs().max() < 0.1, diag  # learned the world's dimming (started at 1.0)
    env = WorldModelEnv(loaded, ToyRewardModel(), str(data), num_envs=2, max_episode_steps=4)
    env.reset()
    assert env.chunk_step(torch.zeros(2, 2, 2)).valid.all()


def test_reward_model_trainer_learns_the_success_frames_and_exports_resnet_rm(tmp_path):
    root = tmp_path / "episodes"
    rng = np.random.default_rng(1)
    for e in range(8):  # success once a bright square appears (frame 5 on)
        images = rng.integers(0, 60, (8, 16, 16, 3), dtype=np.uint8)
        images[5:, 4:12, 4:12] = 250
        success = np.zeros(8, bool)
        success[5] = True  # only the first success is flagged; later frames are positives too
        save_init_trajectory(root / f"traj{e}.npy", images, "t", np.zeros((8, 2)), success)
    main(["fit", "--config", str(ROOT / "configs/toy/reward_model_fit.yaml"), f"--model.init_args.data_path={root}",
          f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.max_epochs=12",
          "--model.init_args.batch_size=16", *QUIET])  # fmt: skip
    path = next(tmp_path.glob("toy_reward_model/version_*")) / "reward_model" / "resnet_rm.pth"
    model = load_reward_model(path)
    assert isinstance(model, ResnetRewardModel)
    images = rng.integers(0, 60, (4, 16, 16, 3), dtype=np.uint8)
    images[2:, 4:12, 4:12] = 250
    with torch.no_grad():
        p = model.success_prob(torch.from_numpy(images))
    assert (p[:2] < 0.5).all() and (p[2:] > 0.5).all(), p


def test_trainers_explain_what_they_cannot_train(tmp_path):
    data = dimming_world(tmp_path, episodes=2, T=4)
    trainer = WorldModelTrainer(ToyWorldModel(action_dim=3), str(data))
    with pytest.raises(ValueError, match="2-D actions but ToyWorldModel takes 3-D actions"):
        trainer.setup("fit")
    trainer = RewardModelTrainer(ToyRewardModel(), str(data), val_fraction=0.0)
    trainer.setup("fit")
    batch = next(iter(trainer.train_dataloader()))
    with pytest.raises(NotImplementedError, match="ToyRewardModel does not implement success_logits"):
        trainer.training_step(batch, 0)
    with pytest.raises(ValueError, match="no training samples"):
        WorldModelTrainer(ToyWorldModel(num_target_frames=8), str(data), val_fraction=0.0).setup("fit")
    with pytest.raises(ValueError, match="instruction 'task 0' is not a task of TaskEmbedResnetRewardModel"):
        RewardModelTrainer(TaskEmbedResnetRewardModel(), str(data), val_fraction=0.5).setup("fit")
    with pytest.raises(ValueError, match="val_fraction must be in"):
        RewardModelTrainer(ResnetRewardModel(), str(data), val_fraction=1.0)


@pytest.mark.parametrize("config, flag, expected", [
    ("world_model_fit", "--model.init_args.data_path=nowhere", "data_path nowhere is not a directory"),
    ("reward_model_fit", "--model.init_args.reward_model.init_args.checkpoint=none.pth",
     "reward model checkpoint none.pth does not exist"),
])  # fmt: skip
def test_bad_paths_fail_in_one_line_before_a_run_dir_exists(tmp_path, monkeypatch, capsys, config, flag, expected):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(ROOT / f"configs/toy/{config}.yaml"), flag])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert info.value.code not in (0, None) and last.startswith("rlinf: error: ") and expected in last, last
    assert not (tmp_path / "runs").exists()
