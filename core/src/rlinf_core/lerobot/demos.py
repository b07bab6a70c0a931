"""LeRobot datasets as SFT demonstrations: :class:`LeRobotDemos` (the config) and :class:`LeRobotDemoDataset`.

``SFTModule(data=LeRobotDemos(root=..., preset="libero"))`` trains on a LeRobot dataset exactly as on an
``rlinf-demos`` directory: samples are ``(Observation with one row, action chunk [C, D])`` cut at load time
(:mod:`rlinf_core.datasets.demos`). Episodes are decoded when first sampled and kept (``cache_episodes``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_core.datasets.demos import DemoDataset
from rlinf_core.lerobot.mapping import FeatureMap, resolve_mapping
from rlinf_core.lerobot.reader import LeRobotFormatError, LeRobotReader

__all__ = ["LeRobotDemoDataset", "LeRobotDemos", "norm_stats_of"]


class LeRobotDemos:
    """A LeRobot dataset (v3.0, v2.1, v2.0) on disk as a demonstration source.

    Args:
        root: the dataset directory (holding ``meta/info.json``); nothing is downloaded.
        preset: feature names of a known layout: ``"libero"`` (physical-intelligence/libero), ``"metaworld"``
            (lerobot/metaworld_mt50), ``"rlinf"`` (what rlinf's writers write); ``None``: the first that fits.
        camera_keys: camera features, main first, then an optional wrist camera (overrides the preset's).
        state_key: proprioception feature → ``Observation.states`` (``""``: the preset's; ``None``: none).
        action_key: action feature (overrides the preset's).
        success_key: per-frame success feature (``""``: the preset's; ``None``: every episode counts as a success).
        image_size: resize frames to this square size (``None``: as stored).
        cache_episodes: decoded episodes kept in memory.
    """

    def __init__(
        self,
        root: str,
        preset: str | None = None,
        camera_keys: list[str] | None = None,
        state_key: str | None = "",
        action_key: str | None = None,
        success_key: str | None = "",
        image_size: int | None = None,
        cache_episodes: int = 256,
    ) -> None:
        self.root = root
        self.reader = LeRobotReader(root)
        self.mapping: FeatureMap = resolve_mapping(
            self.reader.features, preset, camera_keys, state_key, action_key, success_key
        )
        for role, key in [("camera", k) for k in self.mapping.camera_keys] + [
            ("state", self.mapping.state_key),
            ("action", self.mapping.action_key),
            ("success", self.mapping.success_key),
        ]:
            if key:
                self.reader.require(key, role)
        shape = self.reader.features[self.mapping.action_key].get("shape") or ()
        if len(shape) != 1:
            raise LeRobotFormatError(
                f"{root}: action feature {self.mapping.action_key!r} has shape {shape}, expected (D,)"
            )
        self.action_dim = int(shape[0])
        self.image_size = image_size
        self.cache_episodes = cache_episodes
        self.episode = functools.lru_cache(maxsize=max(1, cache_episodes))(self._read_episode)

    def __getstate__(self):  # DataLoader workers (spawn) get an empty cache
        return {k: v for k, v in self.__dict__.items() if k != "episode"}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self.episode = functools.lru_cache(maxsize=max(1, self.cache_episodes))(self._read_episode)

    def _read_episode(self, e: int) -> dict[str, Any]:
        """Episode ``e`` in the arrays :class:`~rlinf_core.datasets.demos.DemoDataset` samples from."""
        r, m = self.reader, self.mapping
        ep: dict[str, Any] = {"actions": r.column(e, m.action_key, "action").astype(np.float32)}
        if ep["actions"].ndim != 2:
            raise LeRobotFormatError(f"{self.root}: actions of episode {e} are {ep['actions'].shape}, expected [T, D]")
        ep["images"] = self._resized(r.frames(e, m.camera_keys[0], "main camera"))
        if len(m.camera_keys) > 1:
            ep["wrist_images"] = self._resized(r.frames(e, m.camera_keys[1], "wrist camera"))
        if m.state_key:
            ep["states"] = r.column(e, m.state_key, "state").astype(np.float32).reshape(len(ep["actions"]), -1)
        ep["instruction"] = np.array(r.task(e))
        ep["task"] = ep["instruction"]
        ep["success"] = np.array(self.success(e).any())
        return ep

    def _resized(self, frames: np.ndarray) -> np.ndarray:
        return resize_square(frames, self.image_size)

    def success(self, e: int) -> np.ndarray:
        """``bool [T]``: whether frame ``t`` shows the task done.

        From the ``success_key`` column, read as LeRobot's ``next.success`` (row ``t``: success after action ``t``,
        i.e. at frame ``t + 1``), with the last row's flag also crediting the last frame (no frame follows it);
        without a column, the episode's last frame only (demonstrations end at success).
        """
        T = self.reader.length(e)
        flags = np.zeros(T, bool)
        if self.mapping.success_key:
            column = self.reader.column(e, self.mapping.success_key, "success").reshape(T) > 0
            flags[1:] = column[:-1]
            flags[-1] |= column[-1]
        else:
            flags[-1] = True
        return flags

    def load(
        self, num_action_chunks: int = 1, only_success: bool = True, episodes: Sequence[int] | None = None
    ) -> LeRobotDemoDataset:
        return LeRobotDemoDataset(self, num_action_chunks, only_success, episodes)

    def norm_stats(self) -> dict[str, dict[str, list]]:
        return norm_stats_of(self.reader, self.mapping)

    def write_norm_stats(self, directory: str | Path) -> Path:
        """Write :meth:`norm_stats` as ``dataset_statistics.json`` (read by ``rlinf_core.models.norm_stats``)."""
        path = Path(directory) / "dataset_statistics.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({Path(self.root).name: self.norm_stats()}, indent=1))
        return path


def norm_stats_of(reader: LeRobotReader, mapping: FeatureMap) -> dict[str, dict[str, list]]:
    """The dataset's ``meta/stats.json`` for the action (and state) features, in the ``norm_stats`` layout of
    :mod:`rlinf_core.models.norm_stats` (``{"action": {"q01", "q99", "min", "max", "mean", "std", "mask"},
    "proprio": {...}}``; q01 / q99 fall back to min / max in datasets written without quantiles)."""
    stats = reader.stats()
    out: dict[str, dict[str, list]] = {}
    for name, key in (("action", mapping.action_key), ("proprio", mapping.state_key)):
        if not key:
            continue
        if key not in stats:
            raise LeRobotFormatError(f"{reader.root}: meta/stats.json has no statistics of {key!r}")
        s = stats[key]
        entry = {k: s[k].reshape(-1).tolist() for k in ("min", "max", "mean", "std") if k in s}
        entry["q01"] = s.get("q01", s["min"]).reshape(-1).tolist()
        entry["q99"] = s.get("q99", s["max"]).reshape(-1).tolist()
        entry["mask"] = [True] * len(entry["q01"])
        out[name] = entry
    return out


def resize_square(frames: np.ndarray, size: int | None) -> np.ndarray:
    """``uint8 [T, H, W, 3]`` → ``[T, size, size, 3]`` (bilinear, antialiased, as the world-model datasets resize)."""
    if size is None or frames.shape[1:3] == (size, size):
        return frames

    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


class LeRobotDemoDataset(DemoDataset):
    """:class:`DemoDataset` over a LeRobot dataset: same samples, same collate and split; episodes decoded lazily."""

    def __init__(
        self,
        source: LeRobotDemos,
        num_action_chunks: int = 1,
        only_success: bool = True,
        episodes: Sequence[int] | None = None,
    ) -> None:
        if num_action_chunks < 1:
            raise ValueError(f"num_action_chunks must be >= 1, got {num_action_chunks}")
        self.source, self.root, self.num_action_chunks = source, Path(source.root), int(num_action_chunks)
        self.meta = {"format": "lerobot", "version": source.reader.version, "action_dim": source.action_dim}
        ids = [e for e in range(source.reader.num_episodes) if not only_success or source.success(e).any()]
        if episodes is not None:
            ids = [ids[i] for i in episodes]
        if not ids:
            raise ValueError(f"{source.root}: no episodes to use (only_success={only_success}, episodes={episodes})")
        self._set(ids)

    def _set(self, ids: list[int]) -> None:
        self.ids = ids
        self.entries = [{"episode_index": e, "length": self.source.reader.length(e)} for e in ids]
        self.episodes = _LazyEpisodes(self.source, ids)
        self.index = np.array(
            [(i, t) for i, e in enumerate(ids) for t in range(self.source.reader.length(e))], np.int64
        )

    def _subset(self, keep: Sequence[int]) -> LeRobotDemoDataset:
        sub = object.__new__(LeRobotDemoDataset)
        sub.source, sub.root, sub.meta, sub.num_action_chunks = (
            self.source,
            self.root,
            self.meta,
            self.num_action_chunks,
        )
        sub._set([self.ids[i] for i in keep])
        return sub


class _LazyEpisodes:
    """``episodes[i]``: the i-th used episode's arrays, decoded through the source's cache."""

    def __init__(self, source: LeRobotDemos, ids: list[int]) -> None:
        self.source, self.ids = source, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.source.episode(self.ids[int(i)])
