"""Clip and frame datasets of recorded episodes: window alignment, padding, labels, errors."""

import numpy as np
import pytest
import torch

from rlinf_core.world_models.datasets import ClipDataset, FrameDataset, split_episodes
from rlinf_core.world_models.init_data import save_init_trajectory


def write_episode(path, T, success_at=None, size=8, instruction="task", D=3):
    """Frame k is filled with value 10*k; its action is [k, -k, ..., k/10]."""
    images = np.stack([np.full((size, size, 3), 10 * k, np.uint8) for k in range(T)])
    actions = np.stack([np.array([k, -k, *([k / 10] * (D - 2))], np.float32) for k in range(T)])
    actions[0] = 0.0
    success = np.zeros(T, bool) if success_at is None else np.arange(T) == success_at
    return save_init_trajectory(path, images, instruction, actions, success)


def frame_ids(frames):
    return (frames[:, 0, 0, 0].long() // 10).tolist()


def test_opensora_windows_left_pad_with_frame_0_and_targets_take_the_actions_that_produced_them(tmp_path):
    write_episode(tmp_path / "traj0.npy", T=10)
    ds = ClipDataset(tmp_path, num_condition_frames=4, num_target_frames=3)
    assert len(ds) == 10 - 3  # starts s = 0 .. T - 1 - Nt
    frames, actions = ds[0]
    assert frames.shape == (7, 8, 8, 3) and frames.dtype == torch.uint8 and actions.shape == (7, 3)
    assert frame_ids(frames) == [0, 0, 0, 0, 1, 2, 3]
    assert actions[:, 0].tolist() == [0, 0, 0, 0, 1, 2, 3]  # padded copies and frame 0 get the pad action
    frames, actions = ds[5]  # s = 5
    assert frame_ids(frames) == [2, 3, 4, 5, 6, 7, 8]
    assert actions[:, 0].tolist() == [2, 3, 4, 5, 6, 7, 8]
    frames, _ = ds[len(ds) - 1]
    assert frame_ids(frames)[-1] == 9  # the last window ends on the last frame


def test_wan_windows_anchor_the_reference_frame_and_pad_the_gripper(tmp_path):
    write_episode(tmp_path / "traj0.npy", T=16)
    ds = ClipDataset(tmp_path, 5, 8, anchor_first_frame=True, pad_gripper=-1.0, stride=2)
    assert len(ds) == len(range(0, 16 - 8, 2))
    frames, actions = ds[0]
    assert frame_ids(frames) == [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert actions[:5].tolist() == [[0, 0, -1.0]] * 5
    frames, actions = ds[3]  # s = 6
    assert frame_ids(frames) == [0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    assert actions[0].tolist() == [0, 0, -1.0] and actions[1, 0] == 3 and actions[-1, 0] == 14


def test_short_episodes_give_no_window_and_collate_stacks(tmp_path):
    write_episode(tmp_path / "traj0.npy", T=3)
    write_episode(tmp_path / "sub" / "traj1.npy", T=6)
    write_episode(tmp_path / "traj1_kir.npy", T=6)  # key-frame init files are not training data
    ds = ClipDataset(tmp_path, 2, 3)
    assert len(ds.files) == 2 and len(ds) == 6 - 3
    frames, actions = ClipDataset.collate([ds[0], ds[1]])
    assert frames.shape == (2, 5, 8, 8, 3) and actions.shape == (2, 5, 3)


def test_frame_labels_are_positive_from_the_first_success_on(tmp_path):
    write_episode(tmp_path / "traj0.npy", T=6, success_at=3, instruction="a")
    write_episode(tmp_path / "traj1.npy", T=4, instruction="b")
    ds = FrameDataset(tmp_path, image_size=4)
    assert len(ds) == 10 and ds.labels == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    frame, label, text = ds[4]
    assert frame.shape == (4, 4, 3) and label == 1.0 and text == "a"
    frames, labels, texts = FrameDataset.collate([ds[0], ds[9]])
    assert frames.shape == (2, 4, 4, 3) and labels.tolist() == [0.0, 0.0] and texts == ["a", "b"]
    assert ds.positive_fraction == pytest.approx(0.3)


def test_bad_data_fails_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ClipDataset(tmp_path / "none", 1, 1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no traj"):
        FrameDataset(tmp_path / "empty")
    save_init_trajectory(tmp_path / "plain" / "traj0.npy", np.zeros((3, 4, 4, 3), np.uint8), "x")
    with pytest.raises(ValueError, match="no per-frame 'success' flags"):
        FrameDataset(tmp_path / "plain")
    with pytest.raises(ValueError, match="must be >= 1"):
        ClipDataset(tmp_path / "plain", 0, 1)


def test_split_keeps_a_train_episode_and_is_seeded():
    train, val = split_episodes(10, 0.2, seed=0)
    assert len(val) == 2 and sorted(train + val) == list(range(10))
    assert split_episodes(10, 0.2, seed=0) == (train, val)
    assert split_episodes(1, 0.5, seed=0) == ([0], [])


def test_a_cache_dir_memory_maps_the_same_items_and_follows_changed_files(tmp_path):
    data = tmp_path / "data"
    write_episode(data / "traj0.npy", T=8, success_at=5)
    plain = ClipDataset(data, 2, 3, image_size=4)
    cached = ClipDataset(data, 2, 3, image_size=4, cache_dir=tmp_path / "cache")
    for i in range(len(plain)):
        assert all(torch.equal(a, b) for a, b in zip(plain[i], cached[i]))
    assert isinstance(cached.episode(0).frames, np.memmap)
    entries = list((tmp_path / "cache").iterdir())
    assert len(entries) == 1 and not any(p.name.endswith(".tmp") for p in entries)
    frames = FrameDataset(data, image_size=4, cache_dir=tmp_path / "cache")  # same file and size: same entry
    assert len(list((tmp_path / "cache").iterdir())) == 1 and frames.labels == [0] * 5 + [1] * 3
    write_episode(data / "traj0.npy", T=9)  # a rewritten file is a new entry
    assert len(ClipDataset(data, 2, 3, image_size=4, cache_dir=tmp_path / "cache")) == 9 - 3
    assert len(list((tmp_path / "cache").iterdir())) == 2
