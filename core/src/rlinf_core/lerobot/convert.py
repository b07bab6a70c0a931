"""Demonstrations as LeRobot datasets: :class:`LeRobotDemoWriter` (``DemoWriter``'s interface) and
:func:`demos_to_lerobot` (an ``rlinf-demos`` directory → a LeRobot v3.0 copy).

An episode's ``success`` becomes ``next.success`` on its last row, which :class:`LeRobotDemos` reads back as a
successful episode; the instruction is the LeRobot task string. ``DemoWriter``'s extra entries (task name, trial
id, ...) have no LeRobot column and are kept in ``meta/rlinf_episodes.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlinf_core.datasets.demos import read_meta
from rlinf_core.lerobot.writer import LeRobotWriter

__all__ = ["LeRobotDemoWriter", "demos_to_lerobot"]


class LeRobotDemoWriter:
    """Writes demonstrations as a LeRobot dataset; the writer is made at the first episode (its shapes).

    Args:
        root: dataset directory.
        action_dim: D of every episode's actions.
        fps: the dataset's frame rate.
        video: H.264 cameras (``False``: lossless PNG frames, for bit-exact copies).
        meta: extra entries kept in ``meta/rlinf_episodes.json`` (``DemoWriter``'s ``meta``).
        overwrite: replace an existing dataset in ``root``.
        num_action_chunks: accepted for ``DemoWriter`` compatibility (LeRobot stores single actions).
    """

    def __init__(
        self,
        root: str | Path,
        action_dim: int,
        fps: int = 10,
        video: bool = True,
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
        num_action_chunks: int = 1,
    ) -> None:
        self.root, self.action_dim, self.fps, self.video, self.overwrite = Path(root), action_dim, fps, video, overwrite
        if (self.root / "meta" / "info.json").exists() and not overwrite:
            raise FileExistsError(f"{self.root} already holds a LeRobot dataset; pass overwrite=True (--overwrite)")
        self.meta: dict[str, Any] = {"num_action_chunks": num_action_chunks, **(meta or {})}
        self.episodes: list[dict[str, Any]] = []
        self.writer: LeRobotWriter | None = None

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
    ) -> int:
        images = np.asarray(images, np.uint8)
        T = len(images)
        if self.writer is None:
            self.writer = LeRobotWriter(
                self.root,
                self.fps,
                self.action_dim,
                None if states is None else np.asarray(states).reshape(T, -1).shape[1],
                image_shape=images.shape[1:3],
                wrist_camera=wrist_images is not None,
                video=self.video,
                overwrite=self.overwrite,
            )
        flags = np.zeros(T, bool)
        flags[-1] = bool(success)
        e = self.writer.add(images, actions, instruction, states=states, success=flags, wrist_images=wrist_images)
        self.episodes.append({"episode_index": e, "length": T, "task": task, "success": bool(success), **extra})
        return e

    def close(self) -> Path:
        """Write the dataset's metadata; returns ``meta/info.json``."""
        if self.writer is None:
            raise ValueError(f"{self.root}: no episode was added")
        self.writer.close()
        extra = {
            **self.meta,
            "episodes": self.episodes,
            "num_episodes": len(self.episodes),
            "num_successful": sum(e["success"] for e in self.episodes),
        }
        (self.root / "meta" / "rlinf_episodes.json").write_text(json.dumps(extra, indent=1))
        return self.root / "meta" / "info.json"


def demos_to_lerobot(
    src: str | Path, dst: str | Path, fps: int = 10, video: bool = True, overwrite: bool = False
) -> Path:
    """Copy an ``rlinf-demos`` dataset to a LeRobot dataset (every episode, in order); returns ``dst``."""

    meta = read_meta(src)
    writer = LeRobotDemoWriter(
        dst,
        meta["action_dim"],
        fps=fps,
        video=video,
        overwrite=overwrite,
        num_action_chunks=meta.get("num_action_chunks", 1),
    )
    for entry in meta["episodes"]:
        with np.load(Path(src) / entry["file"]) as z:
            writer.add(
                z["images"],
                z["actions"],
                str(z["instruction"]),
                bool(z["success"]),
                task=str(z["task"]),
                states=z["states"] if "states" in z.files else None,
                wrist_images=z["wrist_images"] if "wrist_images" in z.files else None,
            )
    writer.close()
    return Path(dst)
