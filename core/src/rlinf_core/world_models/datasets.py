"""Training data of world models and reward classifiers, read from directories of recorded ``traj*.npy`` files.

The files are in the released init format (:mod:`rlinf_core.world_models.init_data`) — one per episode, a 1-D object
array of frame dicts ``{"image": uint8 [H, W, 3], "delta_action": float [D], "instruction": str}`` — plus a
per-frame ``"success"`` flag (:class:`rlinf_core.callbacks.recorder.RolloutRecorder` writes them). Frame ``k``'s
``delta_action`` is the action whose execution produced frame ``k`` (frame 0's is zeros), the convention of the
world-model envs (Wan's condition actions after a chunk are the chunk's last actions, those that produced the
frames now in the queue).

Window alignment (``ClipDataset``), as upstream training, with ``Nc`` condition and ``Nt`` target frames and
start ``s`` in ``0 .. T - 1 - Nt`` (``stride`` apart):

- frames: ``s - Nc + 1 .. s`` (condition) then ``s + 1 .. s + Nt`` (targets), indices below 0 left-padded with
  frame 0 (OpenSora's ``SimpleVLARLinfDataset``: ``vs, ve = s - To + 1, s + Ta + 1``);
- actions: one per frame, frame ``k``'s ``delta_action``: the targets get ``s + 1 .. s + Nt`` (upstream
  ``action_np[s + 1 : s + Ta + 1]``), the condition frames the actions that produced them; padded copies of
  frame 0 and frame 0 itself get the pad action (zeros, gripper ``pad_gripper`` when set — Wan's −1);
- ``anchor_first_frame`` (Wan's keyframe condition, ``ConditionSpec.frames == "first_and_last"``): condition
  slot 0 is always the episode's frame 0 (the reference frame of the env), slots ``1 .. Nc - 1`` are frames
  ``s - Nc + 2 .. s`` (padded as above) — the same layout :func:`~rlinf_core.world_models.init_data.condition_inputs`
  builds at reset and the env keeps after every chunk.

Episodes with fewer than ``Nt + 1`` frames give no window. Models normalise actions themselves (OpenSora with
its q01/q99 statistics, Wan not at all): the datasets return env-scale actions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from rlinf_core.lerobot.episodes import LeRobotEpisodes
from rlinf_core.world_models.init_data import instruction_of, load_init_trajectory

__all__ = ["ClipDataset", "Episode", "FrameDataset", "find_trajectories", "load_episode", "split_episodes"]


@dataclass
class Episode:
    """One recorded episode, stacked: ``frames uint8 [T, H, W, 3]``, ``actions float32 [T, D]``,
    ``success bool [T]`` (all False when the file has no ``success`` flags), ``instruction``."""

    frames: np.ndarray
    actions: np.ndarray
    success: np.ndarray
    instruction: str
    has_success: bool


def find_trajectories(root: str | Path) -> list[Path]:
    """The ``traj*.npy`` episode files under ``root`` (recursively, sorted; ``*_kir.npy`` key-frame files excluded)."""
    root = Path(root)
    if (root / "meta" / "info.json").is_file():  # a LeRobot dataset: one name per episode (rlinf_core.lerobot)
        return LeRobotEpisodes(root).names
    if not root.is_dir():
        raise FileNotFoundError(f"data_path {root} is not a directory of traj*.npy episode files")
    files = sorted(p for p in root.rglob("traj*.npy") if not p.stem.endswith("_kir"))
    if not files:
        raise FileNotFoundError(f"no traj*.npy episode files under {root} (record some with RolloutRecorder)")
    return files


def load_episode(path: Path, image_size: int | None = None) -> Episode:
    """Stack one file's frame dicts (resized to ``image_size``² when given; a one-line error on a bad file)."""
    traj = load_init_trajectory(path)
    images = [np.asarray(f["image"], np.uint8) for f in traj]
    if any(img.shape != images[0].shape or img.ndim != 3 or img.shape[-1] != 3 for img in images):
        raise ValueError(f"{path}: every frame's image must be uint8 [H, W, 3] of one size")
    frames = np.stack(images)
    if image_size is not None and frames.shape[1:3] != (image_size, image_size):
        frames = resize_frames(frames, image_size)
    dims = {np.asarray(f.get("delta_action", ()), np.float32).reshape(-1).shape[0] for f in traj}
    if len(dims) != 1 or 0 in dims:
        raise ValueError(f"{path}: every frame needs a 'delta_action' of one size, got sizes {sorted(dims)}")
    actions = np.stack([np.asarray(f["delta_action"], np.float32).reshape(-1) for f in traj])
    has_success = all("success" in f for f in traj)
    success = np.array([bool(f.get("success", False)) for f in traj])
    return Episode(frames, actions, success, instruction_of(traj), has_success)


def resize_frames(frames: np.ndarray, size: int) -> np.ndarray:
    """``uint8 [T, H, W, 3]`` → ``uint8 [T, size, size, 3]`` (bilinear, antialiased)."""
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


class _EpisodeFiles(Dataset):
    """Indexes episode files once; reads them back through a small per-process cache.

    A ``traj*.npy`` file is an object array: reading one frame decodes the whole episode. With ``cache_dir``
    every episode is also stored once as plain arrays (``frames.npy`` at the training size, ``actions.npy``,
    ``success.npy``) that later reads memory-map, so random access costs one window, not one episode — use it
    for datasets larger than a few episodes per cache slot. Entries are keyed by the file's path, size and
    modification time and the image size, and written atomically.
    """

    def __init__(
        self, data_path: str | Path, image_size: int | None, cache_episodes: int, cache_dir: str | Path | None = None
    ) -> None:
        self.data_path = Path(data_path)
        self.image_size = image_size
        self.cache_episodes = max(1, cache_episodes)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.lerobot = None
        if (self.data_path / "meta" / "info.json").is_file():  # a LeRobot dataset (rlinf_core.lerobot.episodes)
            self.lerobot = LeRobotEpisodes(self.data_path)
        self.files = self.lerobot.names if self.lerobot is not None else find_trajectories(data_path)
        self._load = functools.lru_cache(maxsize=self.cache_episodes)(self._read)

    def _read(self, index: int) -> Episode:
        path = self.files[index]
        if self.lerobot is not None:
            return Episode(*self.lerobot.episode(index, self.image_size), has_success=True)
        if self.cache_dir is None:
            return load_episode(path, self.image_size)
        stat = path.stat()
        key = f"{path.relative_to(self.data_path).as_posix()}|{stat.st_size}|{stat.st_mtime_ns}|{self.image_size}"
        entry = self.cache_dir / hashlib.sha1(key.encode()).hexdigest()[:20]
        if not (entry / "meta.json").is_file():
            ep = load_episode(path, self.image_size)
            tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            for name in ("frames", "actions", "success"):
                np.save(tmp / f"{name}.npy", getattr(ep, name))
            meta = {"source": str(path), "instruction": ep.instruction, "has_success": ep.has_success}
            (tmp / "meta.json").write_text(json.dumps(meta))
            try:
                os.replace(tmp, entry)
            except OSError:  # another process cached it first
                shutil.rmtree(tmp, ignore_errors=True)
        meta = json.loads((entry / "meta.json").read_text())
        return Episode(
            np.load(entry / "frames.npy", mmap_mode="r"),
            np.load(entry / "actions.npy"),
            np.load(entry / "success.npy"),
            meta["instruction"],
            meta["has_success"],
        )

    def episode(self, index: int) -> Episode:
        return self._load(index)

    def __getstate__(self):  # DataLoader workers get an empty cache
        state = self.__dict__.copy()
        state.pop("_load")
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._load = functools.lru_cache(maxsize=self.cache_episodes)(self._read)


class ClipDataset(_EpisodeFiles):
    """Windows of ``num_condition_frames + num_target_frames`` frames and their actions (alignment: module doc).

    Items: ``(frames uint8 [Nc + Nt, H, W, 3], actions float32 [Nc + Nt, D])``; :meth:`collate` stacks them
    into ``[B, Nc + Nt, H, W, 3]`` / ``[B, Nc + Nt, D]``.

    Args:
        data_path: directory (searched recursively) of ``traj*.npy`` episode files.
        num_condition_frames: condition frames ``Nc`` (OpenSora 4, Wan 5).
        num_target_frames: frames to predict ``Nt`` (both 8).
        stride: step between window starts.
        anchor_first_frame: condition slot 0 is the episode's frame 0 (Wan's keyframe condition).
        pad_gripper: last entry of the pad action of padded / initial frames (``None``: all zeros).
        image_size: resize frames to this square size (``None``: as stored).
        cache_episodes: decoded episodes kept in memory per process.
        episodes: use only these episode indices (in sorted file order; train / val splits).
        cache_dir: keep a memory-mapped copy of every episode here (see ``_EpisodeFiles``); ``None``: decode the
            ``.npy`` files on every cache miss.
    """

    def __init__(
        self,
        data_path: str | Path,
        num_condition_frames: int,
        num_target_frames: int,
        stride: int = 1,
        anchor_first_frame: bool = False,
        pad_gripper: float | None = None,
        image_size: int | None = None,
        cache_episodes: int = 16,
        episodes: list[int] | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(data_path, image_size, cache_episodes, cache_dir)
        if num_condition_frames < 1 or num_target_frames < 1 or stride < 1:
            raise ValueError(
                f"num_condition_frames, num_target_frames and stride must be >= 1, got "
                f"{num_condition_frames}, {num_target_frames}, {stride}"
            )
        self.num_condition_frames = num_condition_frames
        self.num_target_frames = num_target_frames
        self.anchor_first_frame = anchor_first_frame
        self.pad_gripper = pad_gripper
        self.index: list[tuple[int, int]] = []
        self.action_dim = 0
        for e in range(len(self.files)) if episodes is None else episodes:
            ep = self.episode(e)
            self.action_dim = self.action_dim or ep.actions.shape[1]
            if ep.actions.shape[1] != self.action_dim:
                raise ValueError(
                    f"{self.files[e]}: actions have {ep.actions.shape[1]} entries, other episodes {self.action_dim}"
                )
            self.index.extend((e, s) for s in range(0, len(ep.frames) - num_target_frames, stride))

    def __len__(self) -> int:
        return len(self.index)

    def frame_indices(self, s: int) -> np.ndarray:
        """``int [Nc + Nt]`` episode frame of every window slot for start ``s`` (-1: a padded copy of frame 0)."""
        Nc, Nt = self.num_condition_frames, self.num_target_frames
        idx = np.arange(s - Nc + 1, s + Nt + 1)
        if self.anchor_first_frame:
            idx[0] = 0
        return np.where(idx < 0, -1, idx)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        e, s = self.index[i]
        ep = self.episode(e)
        idx = self.frame_indices(s)
        frames = ep.frames[np.maximum(idx, 0)]
        pad = np.zeros(self.action_dim, np.float32)
        if self.pad_gripper is not None:
            pad[-1] = self.pad_gripper
        actions = np.where((idx <= 0)[:, None], pad[None], ep.actions[np.maximum(idx, 0)])
        return torch.from_numpy(frames), torch.from_numpy(actions.astype(np.float32))

    @staticmethod
    def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([f for f, _ in items]), torch.stack([a for _, a in items])


class FrameDataset(_EpisodeFiles):
    """Single frames labelled for the success classifier: positive at and after the episode's first success.

    Items: ``(frame uint8 [H, W, 3], label float32 (0 or 1), instruction str)``; :meth:`collate` gives
    ``([B, H, W, 3], [B], list[str])``.

    Args:
        data_path: directory (searched recursively) of ``traj*.npy`` episode files with per-frame ``success``.
        image_size: resize frames to this square size (``None``: as stored).
        cache_episodes: decoded episodes kept in memory per process.
        episodes: use only these episode indices (in sorted file order; train / val splits).
        cache_dir: keep a memory-mapped copy of every episode here; ``None``: decode on every cache miss.
    """

    def __init__(
        self,
        data_path: str | Path,
        image_size: int | None = None,
        cache_episodes: int = 16,
        episodes: list[int] | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(data_path, image_size, cache_episodes, cache_dir)
        self.index: list[tuple[int, int]] = []
        self.labels: list[float] = []
        self.instructions: set[str] = set()
        for e in range(len(self.files)) if episodes is None else episodes:
            ep = self.episode(e)
            self.instructions.add(ep.instruction)
            if not ep.has_success:
                raise ValueError(
                    f"{self.files[e]} has no per-frame 'success' flags: the reward classifier needs them "
                    "(record episodes with rlinf_core.callbacks.recorder.RolloutRecorder)"
                )
            labels = np.maximum.accumulate(ep.success.astype(np.float32))
            self.index.extend((e, t) for t in range(len(ep.frames)))
            self.labels.extend(labels.tolist())

    def __len__(self) -> int:
        return len(self.index)

    @property
    def positive_fraction(self) -> float:
        return float(np.mean(self.labels)) if self.labels else 0.0

    def __getitem__(self, i: int) -> tuple[torch.Tensor, float, str]:
        e, t = self.index[i]
        ep = self.episode(e)
        return torch.from_numpy(np.array(ep.frames[t])), self.labels[i], ep.instruction

    @staticmethod
    def collate(items: list[tuple[torch.Tensor, float, str]]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        return (
            torch.stack([f for f, _, _ in items]),
            torch.tensor([y for _, y, _ in items], dtype=torch.float32),
            [t for _, _, t in items],
        )


def split_episodes(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Episode indices ``0..n-1`` split into (train, val) at random; at least one train episode."""
    order = np.random.default_rng(seed).permutation(n).tolist()
    n_val = min(int(round(n * val_fraction)), n - 1) if val_fraction > 0 else 0
    return sorted(order[n_val:]), sorted(order[:n_val])
