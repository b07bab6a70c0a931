"""LeRobot datasets in and out (rlinf_core.lerobot): the reader against a fixture the real lerobot wrote and decoded,
SFT batches from a LeRobot copy equal to the native demos', a world model trained from a LeRobot dataset, and the
recorder / writer read back. The writer's output passing the real lerobot's loader is recorded in
tests/fixtures/lerobot/README.md (lerobot cannot be installed beside rlinf)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from rlinf_core.builtin.reach_demos import collect_reach_demos
from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.builtin.toy_world_model import ToyWorldModel
from rlinf_core.callbacks.recorder import RolloutRecorder
from rlinf_core.datasets.demos import DemoDataset
from rlinf_core.lerobot.convert import demos_to_lerobot
from rlinf_core.lerobot.demos import LeRobotDemos
from rlinf_core.lerobot.mapping import PRESETS, resolve_mapping
from rlinf_core.lerobot.reader import LeRobotFormatError, LeRobotReader
from rlinf_core.lerobot.writer import LeRobotWriter
from rlinf_core.rl.config import OptimConfig
from rlinf_core.supervised.sft import SFTModule
from rlinf_core.supervised.world_model_trainers import WorldModelTrainer
from rlinf_core.world_models.datasets import ClipDataset, FrameDataset
from rlinf_core.world_models.init_data import load_init_trajectory

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lerobot"
CAMERAS = ("observation.images.image", "observation.images.wrist_image")


@pytest.fixture(scope="module")
def reference():
    with np.load(FIXTURE / "reference.npz") as z:
        return {k.replace("__", "."): z[k] for k in z.files}


def test_reader_gives_what_the_real_lerobot_decoded_frame_for_frame(reference, tmp_path):
    demos = LeRobotDemos(str(FIXTURE / "dataset"))
    assert demos.mapping == PRESETS["rlinf"] and demos.reader.version == "v3.0" and demos.action_dim == 7
    episodes = [demos.episode(e) for e in range(3)]
    assert [len(ep["actions"]) for ep in episodes] == [12, 9, 15]
    cat = {k: np.concatenate([ep[k] for ep in episodes]) for k in ("images", "wrist_images", "states", "actions")}
    np.testing.assert_array_equal(cat["images"], reference[CAMERAS[0]])  # PyAV's decode == lerobot's torchcodec
    np.testing.assert_array_equal(cat["wrist_images"], reference[CAMERAS[1]])
    np.testing.assert_array_equal(cat["states"], reference["observation.state"])
    np.testing.assert_array_equal(cat["actions"], reference["action"])
    assert [str(ep["instruction"]) for ep in episodes] == ["put the red block in the bowl", "open the drawer",
                                                          "put the red block in the bowl"]  # fmt: skip
    assert [bool(ep["success"]) for ep in episodes] == [True, False, True]  # next.success on the last rows
    # the moving square makes every frame distinct: a frame off by one would not match
    assert len({f.tobytes() for f in cat["images"]}) == len(cat["images"])
    stats = demos.norm_stats()
    # a min is exact; a float32 mean of 36 frames of size <= 3.2 in another order: <= 36 · 2^-24 · 3.2 = 7e-6
    assert np.array_equal(stats["action"]["min"], reference["action"].min(0))
    assert np.allclose(stats["proprio"]["mean"], reference["observation.state"].mean(0), rtol=0, atol=1e-5)
    from rlinf_core.models.norm_stats import read_norm_stats, resolve_unnorm_key

    demos.write_norm_stats(tmp_path / "policy")  # where an OpenVLA-style policy reads them, beside its weights
    read = read_norm_stats(tmp_path / "policy")
    assert resolve_unnorm_key(read, "dataset", "test") == "dataset" and read["dataset"]["action"] == stats["action"]


def test_presets_name_the_libero_and_metaworld_features_and_keys_override_them():
    libero = {"image": {}, "wrist_image": {}, "state": {}, "actions": {}}
    assert resolve_mapping(libero) == PRESETS["libero"]
    metaworld = {"observation.image": {}, "observation.state": {}, "action": {}}
    assert resolve_mapping(metaworld) == PRESETS["metaworld"]
    custom = resolve_mapping({"cam": {}, "act": {}}, camera_keys=["cam"], action_key="act", state_key=None)
    assert custom.camera_keys == ("cam",) and custom.action_key == "act" and custom.state_key is None
    with pytest.raises(ValueError, match="no preset fits features"):
        resolve_mapping({"cam": {}})
    with pytest.raises(ValueError, match="unknown LeRobot preset 'aloha'"):
        resolve_mapping(libero, preset="aloha")


def _copy_with_info(tmp_path, edit) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(FIXTURE / "dataset", root)
    info = json.loads((root / "meta" / "info.json").read_text())
    edit(info)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return root


def test_bad_datasets_get_a_one_line_cause(tmp_path):
    with pytest.raises(LeRobotFormatError, match="no feature 'observation.images.top' for camera; the dataset has"):
        LeRobotDemos(str(FIXTURE / "dataset"), camera_keys=["observation.images.top"])
    with pytest.raises(LeRobotFormatError, match="is not a LeRobot dataset"):
        LeRobotReader(tmp_path)
    old = _copy_with_info(tmp_path / "a", lambda info: info.update(codebase_version="v1.6"))
    with pytest.raises(LeRobotFormatError, match="codebase_version v1.6 is not supported"):
        LeRobotReader(old)
    wrong = _copy_with_info(tmp_path / "b", lambda info: info["features"]["observation.state"].update(shape=[9]))
    with pytest.raises(
        LeRobotFormatError, match=r"'observation.state' \(state\) has values of shape \(8,\), info.json says \(9,\)"
    ):
        LeRobotDemos(str(wrong)).episode(0)
    small = _copy_with_info(tmp_path / "c", lambda info: info["features"][CAMERAS[0]].update(shape=[16, 16, 3]))
    with pytest.raises(LeRobotFormatError, match=r"frames are \(32, 32, 3\), info.json says \(16, 16, 3\)"):
        LeRobotDemos(str(small)).episode(0)
    for err in (LeRobotFormatError,):
        assert issubclass(err, ValueError)  # the CLI's one-line `rlinf: error:` path


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory):
    native = tmp_path_factory.mktemp("native")
    collect_reach_demos(native, episodes=6)
    copy = demos_to_lerobot(native, tmp_path_factory.mktemp("lerobot") / "ds", video=False)
    return native, copy


def test_sft_batches_from_a_lerobot_copy_equal_the_native_demos(demo_pair):
    native, copy = demo_pair
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=3, add_value_head=False)
    modules = [SFTModule(policy, str(native), val_fraction=0.34), SFTModule(policy, str(copy), val_fraction=0.34),
               SFTModule(policy, data=LeRobotDemos(str(copy)), val_fraction=0.34)]  # fmt: skip
    for m in modules:
        m.setup("fit")
    want = [DemoDataset.collate([s[i] for i in range(len(s))]) for s in (modules[0].train_set, modules[0].val_set)]
    for m in modules[1:]:
        for ds, (obs, actions) in zip((m.train_set, m.val_set), want):
            got_obs, got_actions = DemoDataset.collate([ds[i] for i in range(len(ds))])
            assert torch.equal(got_actions, actions)
            assert torch.equal(got_obs.main_images, obs.main_images)
            assert torch.equal(got_obs.states, obs.states) and got_obs.task_descriptions == obs.task_descriptions
    with pytest.raises(ValueError, match="exactly one of data_path"):
        SFTModule(policy)


def test_a_world_model_and_a_reward_dataset_train_from_the_fixture(tmp_path):
    data = str(FIXTURE / "dataset")
    clips = ClipDataset(data, num_condition_frames=1, num_target_frames=2)
    frames, actions = clips[0]
    assert frames.shape == (3, 32, 32, 3) and actions.shape == (3, 7)
    labels = FrameDataset(data).labels
    assert labels[11] == 1.0 and labels[35] == 1.0 and sum(labels) == 2  # the last frames of the successful episodes
    torch.manual_seed(0)
    wm = ToyWorldModel(action_dim=7)
    before = {k: v.clone() for k, v in wm.state_dict().items()}
    trainer = pl.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    module = WorldModelTrainer(wm, data, batch_size=4, optim=OptimConfig(lr=1e-2), val_fraction=0.34,
                               export_dir=str(tmp_path / "wm"))  # fmt: skip
    trainer.fit(module)
    assert trainer.global_step == 4 and np.isfinite(float(trainer.callback_metrics["train/loss"]))
    assert any(not torch.equal(before[k], v) for k, v in wm.state_dict().items())
    assert (tmp_path / "wm" / "model.safetensors").is_file()


def test_recorder_lerobot_format_reads_back_as_the_npy_files(tmp_path):
    kw = dict(num_envs=2, max_episode_steps=6, image_size=16, step_size=0.02)
    recs = {
        fmt: RolloutRecorder(out_dir=str(tmp_path / fmt), action_dim=4, format=fmt, video=False)
        for fmt in ("npy", "lerobot")
    }
    for rec in recs.values():
        env = ReachEnv(**kw)
        rec.attach(env, "train")
        env.reset(reset_state_ids=np.array([0, 25]))
        for chunk in np.random.default_rng(0).uniform(-1, 1, (2, 2, 3, 2)).astype(np.float32):
            env.chunk_step(torch.from_numpy(chunk))
        rec.detach(env)
    [root] = recs["lerobot"].close()
    assert root == tmp_path / "lerobot" / "train" / "lerobot_rank0" and recs["lerobot"].written["train"] == [root, root]
    want = [load_init_trajectory(p) for p in recs["npy"].written["train"]]
    got = ClipDataset(root, 1, 1)
    assert len(got.files) == len(want) == 2
    for e, traj in enumerate(want):
        ep = got.episode(e)
        np.testing.assert_array_equal(ep.frames, np.stack([f["image"] for f in traj]))
        np.testing.assert_array_equal(ep.actions, np.stack([f["delta_action"] for f in traj]))
        np.testing.assert_array_equal(ep.success, [f["success"] for f in traj])
        assert ep.instruction == traj[0]["instruction"]


def test_writer_video_round_trip_stays_close_and_refuses_odd_sizes(tmp_path):
    y, x = np.mgrid[0:32, 0:48]
    frames = np.stack([np.stack([x * 4 + 8 * t, y * 7, np.full_like(x, 90)], -1) for t in range(8)]).astype(np.uint8)
    w = LeRobotWriter(tmp_path / "v", fps=15, action_dim=2, image_shape=(32, 48))
    w.add(frames, np.ones((8, 2)), "task")
    w.close()
    got = LeRobotReader(tmp_path / "v").frames(0, CAMERAS[0])
    assert got.shape == frames.shape and np.abs(got.astype(int) - frames).mean() < 3.0
    err = np.abs(got[:, None].astype(int) - frames[None]).mean((2, 3, 4))  # decoded frame i vs source frame j
    assert (err.argmin(1) == np.arange(8)).all()  # each decoded frame is its own source frame, none shifted
    with pytest.raises(ValueError, match="even image size"):
        LeRobotWriter(tmp_path / "odd", fps=10, action_dim=2, image_shape=(31, 32))
    with pytest.raises(FileExistsError, match="already holds a LeRobot dataset"):
        LeRobotWriter(tmp_path / "v", fps=10, action_dim=2)


def test_a_lerobot_demo_dataset_pickles_for_spawned_workers():
    import pickle

    ds = LeRobotDemos(str(FIXTURE / "dataset")).load(2)
    _ = ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[3][1], ds[3][1]) and torch.equal(clone[3][0].main_images, ds[3][0].main_images)


def test_a_v21_dataset_with_libero_names_reads_as_lerobot_0_3_decoded_it():
    """physical-intelligence/libero's layout (image features in the parquet) and a video camera, v2.1, lerobot 0.3.3."""
    demos = LeRobotDemos(str(FIXTURE / "dataset_v21"))
    assert demos.mapping == PRESETS["libero"] and demos.reader.version == "v2.1"
    with np.load(FIXTURE / "reference_v21.npz") as z:
        ref = {k: z[k] for k in z.files}
    eps = [demos.episode(e) for e in range(2)]
    for ours, theirs in (
        ("images", "image"),
        ("wrist_images", "wrist_image"),
        ("states", "state"),
        ("actions", "actions"),
    ):
        np.testing.assert_array_equal(np.concatenate([ep[ours] for ep in eps]), ref[theirs])
    assert [str(ep["instruction"]) for ep in eps] == ["pick up the black bowl", "open the top drawer"]
    stats = demos.norm_stats()  # aggregated from meta/episodes_stats.jsonl (v2.1 has no stats.json)
    # lerobot's per-episode statistics (float64) aggregated, against numpy's float32 over 11 frames of size <= 0.97:
    # <= 11 · 2^-24 · 0.97 = 6.4e-7 for the mean, and about as much for the std
    np.testing.assert_allclose(stats["action"]["mean"], ref["actions"].mean(0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(stats["action"]["std"], ref["actions"].std(0), rtol=0, atol=1e-6)
    assert stats["action"]["q99"] == stats["action"]["max"]
