"""Demonstration datasets on disk, for supervised fine-tuning (behaviour cloning).

Format ``rlinf-demos`` version 1: a directory with ``meta.json`` and one ``.npz`` per episode::

    DIR/
      meta.json                   {"format": "rlinf-demos", "version": 1, "action_dim": 4,
                                   "num_action_chunks": 8, "episodes": [{"file", "length",
                                   "task", "success"}, ...], ...anything the collector adds}
      episodes/episode_000000.npz
        images        uint8   [T, H, W, 3]   main camera, exactly as the policy sees it
        actions       float32 [T, D]         env-scale action taken after image t
        states        float32 [T, S]         optional proprioception
        wrist_images  uint8   [T, H, W, 3]   optional
        instruction   str                    the task description given to the policy
        task          str                    task name (e.g. ``pick-place-v3``)
        success       bool                   the episode reached success

Row ``t`` pairs the observation before step ``t`` with the action taken there. Action chunks
are cut at load time: sample ``t`` is ``actions[t : t + C]``, padded at the end of an episode by
repeating its last action, so one dataset serves policies of any ``num_action_chunks``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from rlinf_core.contracts.observation import Observation

FORMAT = "rlinf-demos"
VERSION = 1


class DemoWriter:
    """Writes episodes in the ``rlinf-demos`` format.

    Args:
        root: dataset directory (created).
        action_dim: D of every episode's actions.
        num_action_chunks: default chunk length readers cut actions into.
        meta: extra entries for ``meta.json`` (env, tasks, image size, collector settings, ...).
        overwrite: replace an existing dataset in ``root``.
    """

    def __init__(
        self,
        root: str | Path,
        action_dim: int,
        num_action_chunks: int = 1,
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.root = Path(root)
        if (self.root / "meta.json").exists() and not overwrite:
            raise FileExistsError(
                f"{self.root} already holds a dataset; pass overwrite=True (--overwrite) to replace it"
            )
        (self.root / "episodes").mkdir(parents=True, exist_ok=True)
        for old in (self.root / "episodes").glob("episode_*.npz"):
            old.unlink()
        self.action_dim = action_dim
        self.meta = {
            "format": FORMAT,
            "version": VERSION,
            "action_dim": action_dim,
            "num_action_chunks": num_action_chunks,
            **(meta or {}),
        }
        self.episodes: list[dict[str, Any]] = []

    def add(
        self,
        images: np.ndarray,
        actions: np.ndarray,
        instruction: str,
        success: bool,
        task: str = "",
        states: np.ndarray | None = None,
        wrist_images: np.ndarray | None = None,
        **extra: Any,
    ) -> Path:
        """Write one episode; returns its file. ``extra`` scalars go into its ``meta.json`` entry."""
        images, actions = np.asarray(images), np.asarray(actions, np.float32)
        T = len(actions)
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3 or len(images) != T:
            raise ValueError(f"images must be uint8 [T={T}, H, W, 3], got {images.dtype} {images.shape}")
        if actions.shape != (T, self.action_dim) or T == 0:
            raise ValueError(f"actions must be float [T, {self.action_dim}] with T >= 1, got {actions.shape}")
        arrays = {
            "images": images,
            "actions": actions,
            "instruction": np.array(instruction),
            "task": np.array(task),
            "success": np.array(bool(success)),
        }
        if states is not None:
            arrays["states"] = np.asarray(states, np.float32).reshape(T, -1)
        if wrist_images is not None:
            arrays["wrist_images"] = np.asarray(wrist_images, np.uint8)
        name = f"episode_{len(self.episodes):06d}.npz"
        path = self.root / "episodes" / name
        np.savez_compressed(path, **arrays)
        self.episodes.append({"file": f"episodes/{name}", "length": T, "task": task, "success": bool(success), **extra})
        return path

    def close(self) -> Path:
        """Write ``meta.json`` (call once, after the last episode); returns its path."""
        self.meta["episodes"] = self.episodes
        self.meta["num_episodes"] = len(self.episodes)
        self.meta["num_successful"] = sum(e["success"] for e in self.episodes)
        path = self.root / "meta.json"
        path.write_text(json.dumps(self.meta, indent=1))
        return path


def read_meta(root: str | Path) -> dict[str, Any]:
    """``meta.json`` of a dataset, checked for format and version."""
    path = Path(root) / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{root} is not an rlinf demo dataset (no meta.json). Hint: collect one, e.g. "
            "python -m rlinf_env_metaworld.collect --out DIR ..."
        )
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(
            f"{path}: expected format {FORMAT} version {VERSION}, got {meta.get('format')} {meta.get('version')}"
        )
    return meta


class DemoDataset(Dataset):
    """Samples ``(Observation with one row, action chunk [C, D])`` from a demo dataset.

    Every episode is loaded into memory. Use :meth:`collate` as the DataLoader's ``collate_fn``
    to get ``(Observation [B], actions [B, C, D])``.

    Args:
        root: dataset directory.
        num_action_chunks: C, actions per sample (default: the dataset's ``num_action_chunks``).
        only_success: skip episodes that did not reach success.
        episodes: use only these episode indices (after the success filter).
    """

    def __init__(
        self,
        root: str | Path,
        num_action_chunks: int | None = None,
        only_success: bool = True,
        episodes: Sequence[int] | None = None,
    ) -> None:
        self.root = Path(root)
        self.meta = read_meta(root)
        self.num_action_chunks = int(num_action_chunks or self.meta.get("num_action_chunks", 1))
        if self.num_action_chunks < 1:
            raise ValueError(f"num_action_chunks must be >= 1, got {self.num_action_chunks}")
        entries = [e for e in self.meta["episodes"] if e["success"] or not only_success]
        if episodes is not None:
            entries = [entries[i] for i in episodes]
        if not entries:
            raise ValueError(f"{root}: no episodes to use (only_success={only_success}, episodes={episodes})")
        self.entries = entries
        self.episodes: list[dict[str, Any]] = []
        for entry in entries:
            with np.load(self.root / entry["file"]) as z:
                self.episodes.append({k: z[k] for k in z.files})
        self.index = np.array(
            [(i, t) for i, ep in enumerate(self.episodes) for t in range(len(ep["actions"]))], np.int64
        )

    @property
    def action_dim(self) -> int:
        return int(self.meta["action_dim"])

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[Observation, torch.Tensor]:
        e, t = self.index[i]
        ep = self.episodes[e]
        actions = ep["actions"]
        rows = np.minimum(np.arange(t, t + self.num_action_chunks), len(actions) - 1)
        obs = Observation(
            main_images=torch.from_numpy(ep["images"][t : t + 1]),
            task_descriptions=[str(ep["instruction"])],
            wrist_images=torch.from_numpy(ep["wrist_images"][t : t + 1]) if "wrist_images" in ep else None,
            states=torch.from_numpy(ep["states"][t : t + 1]) if "states" in ep else None,
        )
        return obs, torch.from_numpy(actions[rows])

    @staticmethod
    def collate(batch: list[tuple[Observation, torch.Tensor]]) -> tuple[Observation, torch.Tensor]:
        return Observation.cat([b[0] for b in batch]), torch.stack([b[1] for b in batch])

    def split(self, val_fraction: float, seed: int = 0) -> tuple[DemoDataset, DemoDataset | None]:
        """Split by episode into (train, val); ``val`` is None when ``val_fraction`` leaves no episode."""
        n = len(self.episodes)
        n_val = int(round(val_fraction * n))
        if n_val == 0:
            return self, None
        if n_val >= n:
            raise ValueError(f"val_fraction={val_fraction} leaves no training episode out of {n}")
        perm = np.random.default_rng(seed).permutation(n)
        return self._subset(sorted(perm[n_val:])), self._subset(sorted(perm[:n_val]))

    def _subset(self, keep: Sequence[int]) -> DemoDataset:
        sub = object.__new__(DemoDataset)
        sub.root, sub.meta, sub.num_action_chunks = self.root, self.meta, self.num_action_chunks
        sub.entries = [self.entries[i] for i in keep]
        sub.episodes = [self.episodes[i] for i in keep]
        sub.index = np.array([(i, t) for i, ep in enumerate(sub.episodes) for t in range(len(ep["actions"]))], np.int64)
        return sub
