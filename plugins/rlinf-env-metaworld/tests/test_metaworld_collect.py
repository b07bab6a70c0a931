"""Scripted-expert demo collection writes a valid rlinf-demos dataset that SFT can learn from."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import numpy as np
import torch

os.environ.setdefault("MUJOCO_GL", "egl")

from rlinf_core.builtin.toy_policy import TinyVLAPolicy  # noqa: E402
from rlinf_core.datasets.demos import DemoDataset, read_meta  # noqa: E402
from rlinf_core.rl.config import OptimConfig  # noqa: E402
from rlinf_core.supervised.sft import SFTModule  # noqa: E402
from rlinf_env_metaworld import INSTRUCTIONS  # noqa: E402
from rlinf_env_metaworld.collect import main  # noqa: E402


def test_collect_writes_dataset_and_sft_learns_from_it(tmp_path):
    out = tmp_path / "demos"
    main(["--tasks", "reach-v3", "button-press-topdown-v3", "--episodes-per-task", "2", "--out", str(out),
          "--image-size", "32", "--num-action-chunks", "4", "--num-envs", "2", "--quiet"])  # fmt: skip
    meta = read_meta(out)
    assert meta["num_episodes"] == 4 and meta["num_successful"] == 4
    assert meta["num_action_chunks"] == 4 and meta["action_dim"] == 4 and meta["image_size"] == 32
    assert sorted((e["task"], e["trial_id"]) for e in meta["episodes"]) == [
        ("button-press-topdown-v3", 0), ("button-press-topdown-v3", 1), ("reach-v3", 0), ("reach-v3", 1)]  # fmt: skip
    for entry in meta["episodes"]:
        with np.load(out / entry["file"]) as z:
            T = entry["length"]
            assert z["images"].shape == (T, 32, 32, 3) and z["images"].dtype == np.uint8
            assert z["actions"].shape == (T, 4) and np.abs(z["actions"]).max() <= 1.0
            assert z["states"].shape == (T, 4)
            assert str(z["instruction"]) == INSTRUCTIONS[entry["task"]] and bool(z["success"])
            assert 0 < T < 100 and z["images"][0].std() > 0
            assert not np.array_equal(z["images"][0], z["images"][-1])  # the arm moved

    ds = DemoDataset(out)
    obs, chunk = ds[0]
    assert chunk.shape == (4, 4) and obs.main_images.shape == (1, 32, 32, 3)

    torch.manual_seed(0)
    policy = TinyVLAPolicy(action_dim=4, num_action_chunks=4, state_dim=4, add_value_head=False)
    all_obs, all_actions = DemoDataset.collate([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        before = float(policy.sft_loss(all_obs, all_actions))
    trainer = pl.Trainer(max_epochs=15, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(
        SFTModule(
            policy,
            str(out),
            batch_size=32,
            optim=OptimConfig(lr=1e-2, clip_grad=None),
            val_fraction=0.0,
            export_dir=str(tmp_path / "p"),
        )
    )
    with torch.no_grad():
        after = float(policy.sft_loss(all_obs, all_actions))
    assert after < 0.7 * before, (before, after)
    assert (tmp_path / "p" / "model.safetensors").is_file()


def test_collect_format_lerobot_writes_the_same_episodes_as_a_lerobot_dataset(tmp_path):
    from rlinf_core.lerobot.demos import LeRobotDemos

    args = ["--tasks", "reach-v3", "--episodes-per-task", "2", "--image-size", "32", "--num-envs", "2",
            "--quiet"]  # fmt: skip
    main([*args, "--out", str(tmp_path / "native")])
    main([*args, "--out", str(tmp_path / "lerobot"), "--format", "lerobot", "--fps", "20"])
    native, copy = DemoDataset(tmp_path / "native"), LeRobotDemos(str(tmp_path / "lerobot"))
    assert copy.reader.version == "v3.0" and copy.reader.fps == 20 and copy.reader.num_episodes == 2
    assert copy.mapping.camera_keys == ("observation.images.image",) and copy.mapping.state_key == "observation.state"
    for e, want in enumerate(native.episodes):
        got = copy.episode(e)
        np.testing.assert_array_equal(got["actions"], want["actions"])  # the scripted experts are deterministic
        np.testing.assert_array_equal(got["states"], want["states"])
        assert str(got["instruction"]) == str(want["instruction"]) and bool(got["success"])
        assert np.abs(got["images"].astype(int) - want["images"]).mean() < 6.0  # H.264 (crf 18, 4:2:0) at 32 px: 4.1
