"""The shipped world-model and reward-classifier training configs, on the tiny world model, through `rlinf fit`."""

from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf_core.cli.main import main
from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.world_models.init_data import save_init_trajectory
from rlinf_core.world_models.reward_models import ResnetRewardModel
from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "opensora"
QUIET = [
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_model_summary=false",
    "--trainer.accelerator=cpu",
]


def _episodes(root: Path, n: int = 4, T: int = 14) -> Path:
    """A bright square pushed right by the action's x; success once it reaches the right third."""
    rng = np.random.default_rng(0)
    for e in range(n):
        x, y = 2, int(rng.integers(4, 22))
        frames, actions = [], []
        for k in range(T):
            a = np.zeros(7, np.float32)
            if k:
                a[0] = 0.5
                x += 2
            img = np.full((32, 32, 3), 60, np.uint8)
            img[y : y + 6, x : x + 6] = 230
            frames.append(img)
            actions.append(a)
        success = np.array([k >= T - 4 for k in range(T)])
        save_init_trajectory(root / f"traj{e}.npy", np.stack(frames), "push right", np.stack(actions), success)
    return root


def _scalars(run: Path, tag: str) -> list[float]:
    ea = EventAccumulator(str(run))
    ea.Reload()
    return [e.value for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def test_world_model_fit_config_trains_and_exports_a_loadable_directory(tmp_path):
    wm, data = tiny_world_model(), _episodes(tmp_path / "episodes")
    main(
        [
            "fit",
            "--config",
            str(CONFIGS / "world_model_fit.yaml"),
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--model.init_args.world_model.init_args.model_path={wm}",
            f"--model.init_args.data_path={data}",
            "--model.init_args.image_size=32",
            "--model.init_args.batch_size=8",
            "--model.init_args.val_fraction=0.25",
            "--model.init_args.optim.lr=3e-3",
            "--model.init_args.stride=2",
            "--trainer.max_epochs=4",
            *QUIET,
        ]
    )
    run = next(tmp_path.glob("opensora_world_model/version_*"))
    val = _scalars(run, "val/loss")
    assert len(val) == 4 and val[-1] < val[0], val
    export = run / "world_model"
    trained = OpenSoraWorldModel(str(export), num_sampling_steps=2)
    base = OpenSoraWorldModel(str(wm))
    assert not torch.equal(trained.dit.t_block[1].weight, base.dit.t_block[1].weight)
    env = WorldModelEnv(
        trained,
        ResnetRewardModel(checkpoint=str(export / "resnet_rm.pth")),
        str(export / "dataset"),
        num_envs=2,
        max_episode_steps=8,
    )
    env.reset()
    assert env.chunk_step(torch.zeros(2, 8, 7)).valid.all()


def test_reward_model_fit_config_exports_resnet_rm(tmp_path):
    data = _episodes(tmp_path / "episodes")
    main(
        [
            "fit",
            "--config",
            str(CONFIGS / "reward_model_fit.yaml"),
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--model.init_args.data_path={data}",
            "--model.init_args.image_size=32",
            "--model.init_args.batch_size=16",
            "--model.init_args.val_fraction=0",
            "--model.init_args.optim.lr=1e-3",
            "--trainer.max_epochs=2",
            *QUIET,
        ]
    )
    ckpt = next(tmp_path.glob("opensora_reward_model/version_*")) / "reward_model" / "resnet_rm.pth"
    rm = ResnetRewardModel(checkpoint=str(ckpt)).eval()
    frames = torch.from_numpy(np.stack([f["image"] for f in np.load(data / "traj0.npy", allow_pickle=True)]))
    with torch.no_grad():
        p = rm.success_prob(frames)
    assert p[-4:].mean() > p[:4].mean()  # success frames score higher than the first frames
