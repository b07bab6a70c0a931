"""World-model scores (rlinf_core.world_models.scoring, ``rlinf wm-score``) on the toy world model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlinf_core.builtin.toy_world_model import ToyRewardModel, ToyWorldModel
from rlinf_core.world_models.datasets import Episode, find_trajectories, load_episode
from rlinf_core.world_models.init_data import save_init_trajectory
from rlinf_core.world_models.scoring import (
    action_response,
    cut_windows,
    precision_recall,
    reward_on_imagined,
    spearman,
    success_of,
)


def roll(frame: np.ndarray, action: np.ndarray, ppu: float = 2.0) -> np.ndarray:
    dx, dy = np.round(action[:2] * ppu).astype(int)
    return np.roll(frame, (dy, dx), axis=(0, 1))


def simulated_episodes(n: int = 4, steps: int = 17, size: int = 16, seed: int = 0) -> list[Episode]:
    """The "real simulator": a textured frame with a bright square, rolled by 2 px per unit action (the toy model's
    own dynamics, so the action-conditioned toy model is exact); success = a bright image centre."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n):
        frame = rng.integers(0, 60, (size, size, 3)).astype(np.uint8)
        frame[2:6, 2:6] = 250
        actions = np.zeros((steps, 2), np.float32)
        actions[1:] = rng.integers(-1, 2, (steps - 1, 2))
        frames, success = [frame], [False]
        for k in range(1, steps):
            if success[-1]:  # the task stays solved: the square stays in the centre
                actions[k] = 0
            frames.append(roll(frames[-1], actions[k]))
            success.append(bool(frames[-1][size // 2 - 2 : size // 2 + 2, size // 2 - 2 : size // 2 + 2].mean() >= 128))
        frames, success = np.stack(frames), np.array(success)
        episodes.append(Episode(frames, actions, success, "reach", True))
    return episodes


def test_an_action_conditioned_model_responds_and_an_action_blind_one_is_blind():
    win = cut_windows(simulated_episodes(), starts=[0, 4], horizon=12)
    assert len(win) == 8 and win.actions.shape == (8, 12, 2) and win.targets.shape == (8, 12, 16, 16, 3)
    conditioned = action_response(ToyWorldModel(pixels_per_unit=2.0).eval(), win, chunk=4)
    assert conditioned.verdict == "responds"
    assert conditioned.mse["recorded"] == pytest.approx([0.0] * 12, abs=1e-9)  # the toy model is the simulator
    assert conditioned.gap["shuffled"] > 1.0 and conditioned.gap["zero"] > 1.0
    blind = action_response(ToyWorldModel(pixels_per_unit=0.0).eval(), win, chunk=4)  # ignores its actions
    assert blind.verdict == "blind"
    assert blind.mse["recorded"] == blind.mse["shuffled"] == blind.mse["zero"]
    assert blind.gap == {"shuffled": 0.0, "zero": 0.0}
    assert len(blind.psnr["recorded"]) == 12 and blind.psnr["recorded"][0] < 60
    assert blind.mse["copy_start"] == pytest.approx(blind.mse["recorded"])  # the blind toy model repeats its start


def test_windows_align_frames_with_the_actions_that_produced_them():
    ep = simulated_episodes(n=1, steps=10)[0]
    win = cut_windows([ep], starts=[3, 8], horizon=4)  # step 8 + 4 frames does not fit in 10 frames
    assert win.where == [(0, 3)]
    np.testing.assert_array_equal(win.start[0], ep.frames[3])
    np.testing.assert_array_equal(win.targets[0], ep.frames[4:8])
    np.testing.assert_array_equal(win.actions[0], ep.actions[4:8])
    np.testing.assert_array_equal(roll(ep.frames[3], win.actions[0, 0]), win.targets[0, 0])
    with pytest.raises(ValueError, match="no window"):
        cut_windows([ep], starts=[8], horizon=4)


def test_precision_recall_by_hand_and_by_counting():
    pred = np.array([1, 1, 0, 1, 0, 0, 1], bool)
    label = np.array([1, 0, 0, 1, 1, 0, 0], bool)
    assert precision_recall(pred, label) == pytest.approx((2 / 4, 2 / 3))
    p, r = precision_recall(np.zeros(3, bool), np.zeros(3, bool))
    assert np.isnan(p) and np.isnan(r)
    rng = np.random.default_rng(1)
    pred, label = rng.random(200) < 0.4, rng.random(200) < 0.3
    tp = sum(a and b for a, b in zip(pred.tolist(), label.tolist()))
    assert precision_recall(pred, label) == pytest.approx((tp / pred.sum(), tp / label.sum()))


def test_success_rule_is_the_envs_consecutive_frames_rule():
    probs = np.array([[0.9, 0.1, 0.9, 0.1], [0.1, 0.6, 0.7, 0.1], [0.5, 0.5, 0.5, 0.4]])
    assert success_of(probs, 0.5, 1).tolist() == [True, True, True]
    assert success_of(probs, 0.5, 2).tolist() == [False, True, True]
    assert success_of(probs, 0.5, 3).tolist() == [False, False, True]


def test_spearman_matches_scipy_with_and_without_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for a, b in [
        (rng.random(6), rng.random(6)),
        ([0.1, 0.2, 0.2, 0.5, 0.0], [0.3, 0.3, 0.1, 0.9, 0.0]),
        ([1, 2, 3, 4], [4, 3, 2, 1]),
    ]:
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
    assert spearman([0.1, 0.4, 0.3, 0.9], [0.2, 0.5, 0.45, 0.8]) == pytest.approx(1.0)
    assert np.isnan(spearman([0.1, 0.1, 0.1], [0.2, 0.3, 0.4]))
    with pytest.raises(ValueError):
        spearman([0.1], [0.2])


def test_reward_on_imagined_frames_against_hand_counts():
    win = cut_windows(simulated_episodes(n=6, seed=3), starts=[0], horizon=12)
    assert 0 < win.labels.any(1).sum() < len(win)  # successful and failed windows
    rm = ToyRewardModel(patch=4, threshold=128.0)
    exact = reward_on_imagined(ToyWorldModel(pixels_per_unit=2.0).eval(), rm, win, chunk=4)
    # the classifier is the success rule itself on real frames, and the exact model reproduces them
    assert exact.frame_real["precision"] == exact.frame_imagined["precision"] == pytest.approx(1.0)
    assert exact.frame_real["recall"] == exact.frame_imagined["recall"] == pytest.approx(1.0)
    assert exact.imagined_success_rate == exact.real_success_rate == pytest.approx(win.labels.any(1).mean())
    assert (
        exact.episode_real
        == exact.episode_imagined
        == {"precision": 1.0, "recall": 1.0, "positive_rate": pytest.approx(exact.real_success_rate)}
    )
    blind = reward_on_imagined(ToyWorldModel(pixels_per_unit=0.0).eval(), rm, win, chunk=4)
    still = np.repeat(win.start[:, None], 12, 1)  # the blind model repeats the start frame
    centre = still[:, :, 6:10, 6:10].mean((2, 3, 4)) >= 128
    tp = (centre & win.labels).sum()
    assert blind.frame_imagined["precision"] == pytest.approx(
        tp / centre.sum() if centre.sum() else np.nan, nan_ok=True
    )
    assert blind.frame_imagined["recall"] == pytest.approx(tp / win.labels.sum())
    assert blind.imagined_success_rate == pytest.approx(centre.any(1).mean())


def test_the_command_scores_recorded_episodes(tmp_path, capsys):
    from rlinf_core.cli.main import main

    for i, e in enumerate(simulated_episodes()):
        save_init_trajectory(tmp_path / "eps" / f"traj{i}.npy", e.frames, e.instruction, e.actions, e.success)
    assert len(find_trajectories(tmp_path / "eps")) == 4 and load_episode(find_trajectories(tmp_path / "eps")[0])
    wm = '{"pixels_per_unit": 0.0}'
    args = [
        "--world_model",
        "ToyWorldModel",
        "--world_model_args",
        wm,
        "--episodes",
        str(tmp_path / "eps"),
        "--horizon",
        "8",
        "--chunk",
        "4",
    ]
    assert main(["wm-score", "actions", *args, "--out", str(tmp_path / "a.json")]) == 0
    assert "verdict: blind" in capsys.readouterr().out
    assert json.loads((tmp_path / "a.json").read_text())["verdict"] == "blind"
    assert main(["wm-score", "reward", *args, "--reward_model", "ToyRewardModel"]) == 0
    assert "episodes, imagined vs real" in capsys.readouterr().out
    assert main(["wm-score", "rank", "--real", "0.1", "0.5", "0.3", "--imagined", "0.2", "0.6", "0.1"]) == 0
    assert "Spearman rank correlation (imagined vs real): 0.500" in capsys.readouterr().out
    assert main(["wm-score", "actions", *args[:-4], "--horizon", "99"]) == 2
    assert "rlinf: error: no window" in capsys.readouterr().err
    assert main(["wm-score", "actions", "--world_model", "NoSuchModel", "--episodes", str(tmp_path)]) == 2
    assert "unknown world_model class_path 'NoSuchModel'" in capsys.readouterr().err
    assert main(["wm-score", "actions", *args, "--device", "cpu", "--out", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text()) == json.loads((tmp_path / "a.json").read_text())
    assert main(["wm-score", "actions", *args, "--device", "gpu0"]) == 2
    assert "rlinf: error: --device 'gpu0' is not a device" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["wm-score", "reward", *args, "--reward_model", "ToyRewardModel", "--device", "cuda"]) == 2
        assert "rlinf: error: --device cuda: no CUDA GPU here" in capsys.readouterr().err


def test_window_labels_stay_positive_after_the_first_success():
    ep = simulated_episodes(n=1, steps=10)[0]
    ep.success[:] = False
    ep.success[5] = True  # a success flag that flickers off again (MetaWorld's per-step success)
    win = cut_windows([ep], starts=[2], horizon=6)
    assert win.labels[0].tolist() == [False, False, True, True, True, True]  # frames 3..8, as the classifier's labels


def test_the_readme_command_runs_with_its_defaults_on_short_episodes(tmp_path, capsys):
    """``rlinf wm-score actions --world_model ToyWorldModel --episodes DIR`` (the README's line, no --horizon) on
    episodes shorter than 24 steps: the horizon defaults to what the episodes hold."""
    from rlinf_core.cli.main import main

    for i, e in enumerate(simulated_episodes(steps=13)):
        save_init_trajectory(tmp_path / "eps" / f"traj{i}.npy", e.frames, e.instruction, e.actions, e.success)
    assert main(["wm-score", "actions", "--world_model", "ToyWorldModel", "--episodes", str(tmp_path / "eps")]) == 0
    out = capsys.readouterr().out
    assert "horizon 12 frames" in out and "open-loop error of 4 windows, k = 1..12" in out
    assert "verdict: responds" in out
