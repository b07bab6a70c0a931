"""Initial-state data of world-model envs, in the released on-disk format, and the condition frames
a world model starts an episode from.

Format (RLinf's ``dataset/traj*.npy``, ``traj*_kir.npy``): every ``.npy`` file is a 1-D object array of
per-frame dicts with ``"image"`` (uint8 ``[H, W, 3]``), ``"delta_action"`` (float ``[D]``) and
``"instruction"`` (str; ``"task"`` is accepted too); recorded episodes add a per-frame ``"success"``
(bool). A plain ``traj*.npy`` holds the initial frame (recorded ones: the whole episode, of which a reset
uses frame 0); a keyframe-init ``traj*_kir.npy`` holds frame 0 (the reference) plus the frames before a
keyframe.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rlinf_core.contracts.world_model import ConditionSpec


def save_init_trajectory(
    path: str | Path,
    images: np.ndarray,
    instruction: str,
    delta_actions: np.ndarray | None = None,
    success: np.ndarray | None = None,
) -> Path:
    """Write one initial-state / episode file in the released format (atomically: a temporary file, then renamed).

    Args:
        path: the ``.npy`` file (``traj<i>.npy``, or ``traj<i>_kir.npy`` for keyframe init).
        images: uint8 ``[T, H, W, 3]`` frames (frame 0 = the episode's first observation).
        instruction: the task instruction.
        delta_actions: float ``[T, D]``: frame ``k``'s entry is the action that produced frame ``k`` (frame 0:
            zeros); default: zeros, ``D = 7``.
        success: bool ``[T]`` per-frame success (recorded episodes, training data of the reward classifier);
            ``None``: no ``success`` key.
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 [T, H, W, 3], got {images.dtype} {list(images.shape)}")
    if delta_actions is None:
        delta_actions = np.zeros((len(images), 7), np.float32)
    delta_actions = np.asarray(delta_actions, np.float32)
    if delta_actions.ndim != 2 or len(delta_actions) != len(images):
        raise ValueError(f"delta_actions must be [T={len(images)}, D], got {list(delta_actions.shape)}")
    frames = [
        {"image": img, "delta_action": act, "instruction": instruction} for img, act in zip(images, delta_actions)
    ]
    if success is not None:
        success = np.asarray(success, bool).reshape(-1)
        if len(success) != len(images):
            raise ValueError(f"success must be [T={len(images)}], got {list(success.shape)}")
        for frame, ok in zip(frames, success):
            frame["success"] = bool(ok)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, np.array(frames, dtype=object), allow_pickle=True)
    os.replace(tmp, path)
    return path


def load_init_trajectory(path: Path) -> list[dict]:
    """The frame dicts of one initial-state file (a one-line ``ValueError`` if it is not in the format)."""
    frames = np.load(path, allow_pickle=True)
    if frames.ndim != 1 or not len(frames) or not isinstance(frames[0], dict) or "image" not in frames[0]:
        raise ValueError(f"{path}: expected a 1-D object array of frame dicts with an 'image' key")
    return list(frames)


def instruction_of(traj: list[dict]) -> str:
    text = traj[0].get("instruction", traj[0].get("task", ""))
    return text.decode() if isinstance(text, bytes) else str(text)


def condition_inputs(traj: list[dict], spec: ConditionSpec, action_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Condition frames uint8 ``[T, H, W, 3]`` and actions float32 ``[T, D]`` of one file, as ``spec`` asks."""
    T = spec.num_frames
    pad = np.zeros(action_dim, np.float32)
    if spec.pad_gripper is not None:
        pad[-1] = spec.pad_gripper
    # upstream (RLinf NpyTrajectoryDatasetWrapper "last_n_frames"): the file's last T - 1 frames whenever it has
    # at least T - 1 frames, so a file of exactly T - 1 frames puts its own frame 0 in slot 1
    tail = traj[-(T - 1) :] if T > 1 else []
    if spec.frames == "first_and_last" and T > 1 and len(tail) == T - 1:
        chosen = [(traj[0], pad), *((f, _action(f, action_dim)) for f in tail)]
    else:
        chosen = [(traj[0], pad)] * T
    frames = np.stack([np.asarray(f["image"], np.uint8) for f, _ in chosen])
    actions = np.stack([a for _, a in chosen]).astype(np.float32)
    return frames, actions


def _action(frame: dict, action_dim: int) -> np.ndarray:
    a = np.asarray(frame.get("delta_action", np.zeros(action_dim)), np.float32).reshape(-1)
    if a.shape[0] != action_dim:
        raise ValueError(f"init frame delta_action has {a.shape[0]} entries, the world model expects {action_dim}")
    return a
