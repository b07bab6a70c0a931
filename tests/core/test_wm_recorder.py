"""RolloutRecorder: episodes of any env written in the released format, read back by WorldModelEnv and the datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_world_model import ToyRewardModel, ToyWorldModel
from rlinf_core.callbacks.recorder import RolloutRecorder
from rlinf_core.cli.main import main
from rlinf_core.envs.vector import vectorize
from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.world_models.datasets import ClipDataset, FrameDataset
from rlinf_core.world_models.init_data import load_init_trajectory

ROOT = Path(__file__).resolve().parents[2]


def test_files_align_each_frame_with_the_action_that_produced_it(tmp_path):
    kw = dict(num_envs=2, max_episode_steps=6, image_size=16, step_size=0.02)
    env, twin = ReachEnv(**kw), ReachEnv(**kw)
    rec = RolloutRecorder(out_dir=str(tmp_path), action_dim=4)
    rec.attach(env, "train")
    ids = np.array([0, 25])
    obs = env.reset(reset_state_ids=ids)
    want = [[img] for img in twin.reset(reset_state_ids=ids).main_images.numpy()]
    success = [[False], [False]]
    actions = np.random.default_rng(0).uniform(-1, 1, (2, 2, 3, 2)).astype(np.float32)  # [chunk, env, step, dim]
    for chunk in actions:
        env.chunk_step(torch.from_numpy(chunk))
        for c in range(3):  # the twin steps one action at a time: its observation after every step
            res = twin.chunk_step(torch.from_numpy(chunk[:, c : c + 1]))
            for b in range(2):
                want[b].append(res.obs.main_images[b].numpy())
                success[b].append(bool(res.success[b, 0]))
    assert env.pop_frames() == []  # frames captured for the recorder are not kept for a video
    files = rec.written["train"]
    assert len(files) == 2 and [p.name for p in files] == ["traj_rank0_000000.npy", "traj_rank0_000001.npy"]
    for b, path in enumerate(files):
        traj = load_init_trajectory(path)
        assert len(traj) == 7 and traj[0]["instruction"] == obs.task_descriptions[b]
        for k, frame in enumerate(traj):
            assert np.array_equal(frame["image"], want[b][k]), (b, k)
            assert frame["success"] == success[b][k]
            a = np.zeros(2, np.float32) if k == 0 else actions[(k - 1) // 3, b, (k - 1) % 3]
            np.testing.assert_array_equal(frame["delta_action"], [a[0], 0.0, 0.0, a[1]])  # gripper stays last
    rec.detach(env)
    assert env.step_observers == ()


def test_a_video_and_the_recorder_share_the_captured_frames(tmp_path):
    env = ReachEnv(num_envs=2, max_episode_steps=4, image_size=8)
    rec = RolloutRecorder(out_dir=str(tmp_path))
    rec.attach(env, "eval")
    env.capture_frames = True
    env.reset()
    env.chunk_step(torch.zeros(2, 4, 2))
    assert len(env.pop_frames()) == 5 and len(rec.written["eval"]) == 2


def test_a_toy_fit_records_files_that_the_world_model_env_and_the_datasets_read(tmp_path, capsys):
    extra = {"trainer": {"callbacks": [{
        "class_path": "RolloutRecorder",
        "init_args": {"image_size": 16, "max_files": 100},
    }]}}  # fmt: skip
    (tmp_path / "record.yaml").write_text(yaml.safe_dump(extra))
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs/toy/reach_grpo.yaml"),
            "--config",
            str(tmp_path / "record.yaml"),
            "--trainer.max_epochs=2",
            "--trainer.check_val_every_n_epoch=2",
            "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--model.init_args.rollout.show_progress=false",
            "--model.init_args.rollout.pipeline_stage_num=2",
        ]
    )  # fmt: skip  (two stage envs, stepped in threads)
    rollouts = next(tmp_path.glob("reach_grpo/version_*")) / "rollouts"
    train, evals = sorted((rollouts / "train").glob("traj*.npy")), sorted((rollouts / "eval").glob("traj*.npy"))
    # 2 epochs x 64 episodes capped at 100 (two stage envs share the numbering: none overwritten); every eval episode
    assert len(train) == 100 and len(evals) == 60
    assert "reached max_files=100 for train" in capsys.readouterr().err
    traj = load_init_trajectory(train[0])
    assert traj[0]["image"].shape == (16, 16, 3) and traj[0]["instruction"].startswith("move to the")
    assert {"image", "delta_action", "instruction", "success"} <= set(traj[0]) and len(traj) > 1
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(), str(rollouts / "train"), num_envs=4, max_episode_steps=4)
    out = env.reset()
    assert out.main_images.shape == (4, 16, 16, 3)
    assert env.chunk_step(torch.zeros(4, 2, 2)).valid.all()
    clips = ClipDataset(rollouts / "train", 1, 2)
    frames = FrameDataset(rollouts / "eval")
    assert len(clips) > 0 and len(frames) > 60 and 0 < frames.positive_fraction < 1


@pytest.mark.parametrize("bad", [{"image_size": 0}, {"action_dim": 0}, {"min_steps": 0}])
def test_bad_settings_fail_in_one_line(bad):
    with pytest.raises(ValueError, match="RolloutRecorder"):
        RolloutRecorder(**bad)


def test_worker_process_envs_record_the_same_files(tmp_path):
    out = {}
    for workers in (0, 2):
        env = vectorize(ReachEnv(num_envs=4, max_episode_steps=4, image_size=8), workers)
        rec = RolloutRecorder(out_dir=str(tmp_path / str(workers)))
        rec.attach(env, "train")
        try:
            env.reset(reset_state_ids=np.array([0, 1, 2, 3]))
            env.chunk_step(torch.full((4, 4, 2), 0.5))
        finally:
            env.close()
        out[workers] = [load_init_trajectory(p) for p in rec.written["train"]]
    assert len(out[0]) == len(out[2]) == 4
    for a, b in zip(out[0], out[2]):
        assert all(np.array_equal(x["image"], y["image"]) and x["success"] == y["success"] for x, y in zip(a, b))


def test_a_world_model_env_is_recorded_frame_by_frame(tmp_path):
    from rlinf_core.world_models.init_data import save_init_trajectory

    img = np.zeros((12, 12, 3), np.uint8)
    img[5:7, 1:3] = 255
    save_init_trajectory(tmp_path / "init" / "traj0.npy", img[None], "slide right", np.zeros((1, 2)))
    env = WorldModelEnv(ToyWorldModel(), ToyRewardModel(patch=2), str(tmp_path / "init"), num_envs=1,
                        max_episode_steps=6)  # fmt: skip
    rec = RolloutRecorder(out_dir=str(tmp_path / "out"))
    rec.attach(env, "train")
    env.reset()
    for _ in range(2):
        env.chunk_step(torch.tensor([[[0.5, 0.0]] * 3]))  # one pixel right per step
    traj = load_init_trajectory(rec.written["train"][0])
    assert len(traj) == 5 and traj[0]["instruction"] == "slide right"  # the dot reaches the centre at step 4
    for k, frame in enumerate(traj):
        assert np.array_equal(frame["image"], np.roll(img, k, axis=1)), k
        assert frame["delta_action"].tolist() == ([0.0, 0.0] if k == 0 else [0.5, 0.0])
    assert [f["success"] for f in traj] == [False] * 4 + [True]


def test_rlinf_validate_records_the_eval_episodes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["validate", "--config", str(ROOT / "configs/toy/reach_grpo.yaml"), "--trainer.callbacks+=RolloutRecorder",
          "--trainer.callbacks.init_args.out_dir=recorded", "--model.init_args.env.init_args.trials_per_task=2",
          "--model.init_args.env.init_args.num_envs=8", "--trainer.enable_progress_bar=false",
          f"--trainer.logger.init_args.save_dir={tmp_path}"])  # fmt: skip
    files = sorted((tmp_path / "recorded" / "eval").glob("traj*.npy"))
    assert len(files) == 6 and not (tmp_path / "recorded" / "train").exists()  # 3 tasks x 2 trials, once each
    assert {load_init_trajectory(p)[0]["instruction"] for p in files} == {
        "move to the red square",
        "move to the green square",
        "move to the blue square",
    }


def test_a_second_recorder_continues_the_numbering_instead_of_overwriting(tmp_path):
    names = []
    for _ in range(2):
        env = ReachEnv(num_envs=2, max_episode_steps=2, image_size=8)
        rec = RolloutRecorder(out_dir=str(tmp_path))
        rec.attach(env, "train")
        env.reset()
        env.chunk_step(torch.zeros(2, 2, 2))
        names += [p.name for p in rec.written["train"]]
    assert names == [f"traj_rank0_{i:06d}.npy" for i in range(4)] and len(list((tmp_path / "train").iterdir())) == 4
