"""LeRobot episodes in the world-model training layout (:class:`rlinf_core.world_models.datasets.Episode`).

``ClipDataset`` / ``FrameDataset`` (hence the world-model and reward-model trainers) read a LeRobot dataset when
their ``data_path`` holds ``meta/info.json``. Frame ``k``'s ``delta_action`` is the action that produced it: LeRobot
row ``k - 1``'s action (frame 0's is zeros; the last row's action produced no recorded frame and is dropped).
Success labels come from the success column or the episode end (:meth:`LeRobotDemos.success`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlinf_core.lerobot.demos import LeRobotDemos, resize_square

__all__ = ["LeRobotEpisodes"]


class LeRobotEpisodes:
    """Episodes of a LeRobot dataset for world models: the main camera, the actions, per-frame success.

    Args:
        root: the dataset directory.
        preset: feature-name preset (``None``: the first that fits), as :class:`LeRobotDemos`.
    """

    def __init__(self, root: str | Path, preset: str | None = None) -> None:
        self.source = LeRobotDemos(str(root), preset=preset, cache_episodes=1)
        reader = self.source.reader
        self.names = [Path(root) / f"episode_{int(ep['episode_index']):06d}" for ep in reader.episodes]

    def __len__(self) -> int:
        return len(self.names)

    def episode(self, e: int, image_size: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """``(frames uint8 [T, H, W, 3], delta_actions float32 [T, D], success bool [T], instruction)``."""
        reader, mapping = self.source.reader, self.source.mapping
        frames = resize_square(reader.frames(e, mapping.camera_keys[0], "main camera"), image_size)
        actions = reader.column(e, mapping.action_key, "action").astype(np.float32).reshape(len(frames), -1)
        delta = np.zeros_like(actions)
        delta[1:] = actions[:-1]
        return frames, delta, self.source.success(e), reader.task(e)
