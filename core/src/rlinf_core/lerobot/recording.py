"""Recorded episodes (the world-model layout: frame ``k`` with the action that produced it) into a LeRobot dataset.

``RolloutRecorder(format="lerobot")`` and ``metaworld-collect --format lerobot`` write through this. Row ``k`` of the
dataset holds frame ``k``, the action taken after it (frame ``k + 1``'s producing action; zeros after the last
frame) and ``next.success`` = frame ``k + 1``'s success (the last row: the last frame's), so
:class:`~rlinf_core.lerobot.episodes.LeRobotEpisodes` gives back the recorded actions and success flags exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlinf_core.lerobot.writer import LeRobotWriter

__all__ = ["LeRobotEpisodeSink"]


class LeRobotEpisodeSink:
    """Writes recorded episodes to a LeRobot dataset at ``root`` (made at the first episode, written in pieces of
    ``episodes_per_file`` episodes, finished by :meth:`close`).

    Args:
        root: the dataset directory (must not hold a dataset yet, unless ``resume``).
        fps: the dataset's frame rate (env steps per second of the recorded video).
        video: H.264 cameras (``False``: lossless PNG frames).
        episodes_per_file: episodes per data / video file (a killed process loses at most the unfinished one).
        resume: append to the dataset in ``root`` (one that was cut short) instead of refusing it.
    """

    def __init__(
        self, root: str | Path, fps: int = 10, video: bool = True, episodes_per_file: int = 100, resume: bool = False
    ) -> None:
        self.root, self.fps, self.video = Path(root), fps, video
        self.episodes_per_file, self.resume = episodes_per_file, resume
        self.writer: LeRobotWriter | None = None
        self.count = 0
        self.resumed_from = 0  # episodes the dataset already held (``resume``)

    def add(self, frames: np.ndarray, delta_actions: np.ndarray, success: np.ndarray, instruction: str) -> None:
        frames = np.asarray(frames, np.uint8)
        delta_actions = np.asarray(delta_actions, np.float32)
        success = np.asarray(success, bool).reshape(-1)
        if self.writer is None:
            self.writer = LeRobotWriter(
                self.root,
                self.fps,
                action_dim=delta_actions.shape[1],
                image_shape=frames.shape[1:3],
                video=self.video,
                episodes_per_file=self.episodes_per_file,
                resume=self.resume,
            )
            self.resumed_from = self.writer.num_episodes
        actions = np.zeros_like(delta_actions)
        actions[:-1] = delta_actions[1:]
        next_success = np.concatenate([success[1:], success[-1:]])
        self.writer.add(frames, actions, instruction, success=next_success)
        self.count += 1

    def flush(self) -> None:
        """Finish the current piece now (see :meth:`LeRobotWriter.flush`)."""
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> Path | None:
        """Finish the last piece; returns the dataset root (``None`` when no episode came)."""
        if self.writer is None:
            return None
        return self.writer.close()
