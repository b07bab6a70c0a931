"""Writes LeRobot datasets (codebase version v3.0) that lerobot's loader and visualiser open and rlinf reads back.

Layout (one data file and one video file per camera, episodes one after another, as lerobot writes them)::

    ROOT/meta/info.json                       features, fps, path templates, totals
    ROOT/meta/stats.json                      min / max / mean / std / count (+ q01 / q99 of vectors)
    ROOT/meta/tasks.parquet                   task strings (the pandas index) → task_index
    ROOT/meta/episodes/chunk-000/file-000.parquet   per episode: length, rows, video time span, tasks
    ROOT/data/chunk-000/file-000.parquet      one row per frame
    ROOT/videos/<camera>/chunk-000/file-000.mp4     H.264 (yuv420p), or PNG ``image`` features with video=False

Feature names are the ``"rlinf"`` preset of :mod:`rlinf_core.lerobot.mapping`: ``observation.images.image``,
``observation.images.wrist_image``, ``observation.state``, ``action``, ``next.success``. Row ``t`` pairs the
observation before step ``t`` with the action taken there (LeRobot's and ``rlinf-demos``' convention).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np

from rlinf_core.lerobot.mapping import PRESETS
from rlinf_core.lerobot.reader import INSTALL_HINT

__all__ = ["LeRobotWriter"]

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
CAMERAS = PRESETS["rlinf"].camera_keys


class LeRobotWriter:
    """Accumulates episodes; :meth:`close` writes the metadata. Videos are encoded as episodes arrive.

    Args:
        root: dataset directory (created).
        fps: frames per second stored in ``info.json`` (video time base and timestamps).
        action_dim: D of every action.
        state_dim: size of ``observation.state`` (``None``: no state feature).
        image_shape: ``(H, W)`` of every camera frame.
        wrist_camera: also write ``observation.images.wrist_image``.
        video: encode cameras as H.264 mp4 (``False``: lossless PNG ``image`` features in the parquet).
        robot_type: ``info.json``'s ``robot_type``.
        overwrite: replace an existing dataset in ``root``.
    """

    def __init__(
        self,
        root: str | Path,
        fps: int,
        action_dim: int,
        state_dim: int | None = None,
        image_shape: tuple[int, int] = (128, 128),
        wrist_camera: bool = False,
        video: bool = True,
        robot_type: str | None = None,
        overwrite: bool = False,
    ) -> None:
        self.root = Path(root)
        if (self.root / "meta" / "info.json").exists():
            if not overwrite:
                raise FileExistsError(f"{self.root} already holds a LeRobot dataset; pass overwrite=True (--overwrite)")
            for sub in ("meta", "data", "videos"):
                shutil.rmtree(self.root / sub, ignore_errors=True)
        H, W = image_shape
        if video and (H % 2 or W % 2):
            raise ValueError(f"H.264 (yuv420p) needs an even image size, got {H}x{W}: use video=False or resize")
        self.fps, self.action_dim, self.state_dim, self.image_shape = int(fps), action_dim, state_dim, (H, W)
        self.cameras = CAMERAS[:2] if wrist_camera else CAMERAS[:1]
        self.video, self.robot_type = video, robot_type
        self.rows: dict[str, list] = {
            k: []
            for k in (
                "action",
                "observation.state",
                "next.success",
                "timestamp",
                "frame_index",
                "episode_index",
                "index",
                "task_index",
                *([] if video else self.cameras),
            )
        }
        self.episodes: list[dict] = []
        self.tasks: dict[str, int] = {}
        self._encoders: dict[str, tuple] = {}
        self._image_sums = {k: np.zeros((4, 3), np.float64) for k in self.cameras}  # sum, sum², min, max per channel
        self._frames_in_video = 0
        self._closed = False

    # ------------------------------------------------------------------ episodes
    def add(
        self,
        images: np.ndarray,
        actions: np.ndarray,
        task: str,
        states: np.ndarray | None = None,
        success: np.ndarray | None = None,
        wrist_images: np.ndarray | None = None,
    ) -> int:
        """Add one episode (``images uint8 [T, H, W, 3]``, ``actions [T, D]``, ``success bool [T]``); returns its
        index."""
        if self._closed:
            raise RuntimeError("LeRobotWriter is closed")
        actions = np.asarray(actions, np.float32)
        T = len(actions)
        if T == 0 or actions.shape != (T, self.action_dim):
            raise ValueError(f"actions must be float [T, {self.action_dim}] with T >= 1, got {actions.shape}")
        cams = {self.cameras[0]: images}
        if len(self.cameras) > 1:
            if wrist_images is None:
                raise ValueError("this writer has a wrist camera: pass wrist_images")
            cams[self.cameras[1]] = wrist_images
        for key, frames in cams.items():
            frames = np.asarray(frames)
            if frames.dtype != np.uint8 or frames.shape != (T, *self.image_shape, 3):
                raise ValueError(
                    f"{key} frames must be uint8 [{T}, {self.image_shape[0]}, {self.image_shape[1]}, 3], "
                    f"got {frames.dtype} {frames.shape}"
                )
            self._image_stats(key, frames)
            if self.video:
                self._encode(key, frames)
            else:
                self.rows[key].extend({"bytes": _png(f), "path": None} for f in frames)
        if self.state_dim is not None:
            states = np.asarray(states, np.float32).reshape(T, -1)
            if states.shape[1] != self.state_dim:
                raise ValueError(f"states must be [T, {self.state_dim}], got {states.shape}")
            self.rows["observation.state"].extend(states)
        success = np.zeros(T, bool) if success is None else np.asarray(success, bool).reshape(T)
        e, start = len(self.episodes), len(self.rows["action"])
        task_index = self.tasks.setdefault(task, len(self.tasks))
        self.rows["action"].extend(actions)
        self.rows["next.success"].extend(success.tolist())
        self.rows["timestamp"].extend((np.arange(T) / self.fps).astype(np.float32).tolist())
        self.rows["frame_index"].extend(range(T))
        self.rows["episode_index"].extend([e] * T)
        self.rows["index"].extend(range(start, start + T))
        self.rows["task_index"].extend([task_index] * T)
        entry = {
            "episode_index": e,
            "tasks": [task],
            "length": T,
            "data/chunk_index": 0,
            "data/file_index": 0,
            "dataset_from_index": start,
            "dataset_to_index": start + T,
        }
        if self.video:
            t0 = self._frames_in_video / self.fps
            for key in self.cameras:
                entry.update(
                    {
                        f"videos/{key}/chunk_index": 0,
                        f"videos/{key}/file_index": 0,
                        f"videos/{key}/from_timestamp": t0,
                        f"videos/{key}/to_timestamp": t0 + T / self.fps,
                    }
                )
            self._frames_in_video += T
        entry.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        self.episodes.append(entry)
        return e

    def _encode(self, key: str, frames: np.ndarray) -> None:
        try:
            import av
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(f"writing LeRobot videos needs PyAV: {INSTALL_HINT}") from err
        if key not in self._encoders:
            path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
            path.parent.mkdir(parents=True, exist_ok=True)
            container = av.open(str(path), "w")
            stream = container.add_stream("libx264", rate=self.fps, options={"crf": "18", "g": "2", "preset": "fast"})
            stream.height, stream.width = self.image_shape
            stream.pix_fmt = "yuv420p"
            self._encoders[key] = (container, stream)
        container, stream = self._encoders[key]
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))

    def _image_stats(self, key: str, frames: np.ndarray) -> None:
        x = frames.reshape(-1, 3).astype(np.float64) / 255.0
        acc = self._image_sums[key]
        first = not acc[3].any() and not acc[0].any()
        acc[0] += x.sum(0)
        acc[1] += (x**2).sum(0)
        acc[2] = x.min(0) if first else np.minimum(acc[2], x.min(0))
        acc[3] = np.maximum(acc[3], x.max(0))

    # ------------------------------------------------------------------ metadata
    def close(self) -> Path:
        """Finish the videos, write the frames and the metadata; returns the dataset root."""
        if self._closed:
            return self.root
        self._closed = True
        if not self.episodes:
            raise ValueError(f"{self.root}: no episode was added")
        for container, stream in self._encoders.values():
            container.mux(stream.encode(None))
            container.close()
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as err:  # pragma: no cover
            raise ImportError(f"writing LeRobot datasets needs pyarrow: {INSTALL_HINT}") from err
        features = self._features()
        columns = {}
        for key, values in self.rows.items():
            if key == "observation.state" and self.state_dim is None:
                continue
            if key in ("action", "observation.state"):
                flat = pa.array(np.asarray(values, np.float32).reshape(-1))
                columns[key] = pa.FixedSizeListArray.from_arrays(flat, features[key]["shape"][0])
            elif key in self.cameras:
                columns[key] = pa.array(values, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
            else:
                dtype = {"next.success": pa.bool_(), "timestamp": pa.float32()}.get(key, pa.int64())
                columns[key] = pa.array(values, dtype)
        data_path = self.root / DATA_PATH.format(chunk_index=0, file_index=0)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), data_path)
        (self.root / EPISODES_FILE).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.episodes), self.root / EPISODES_FILE)
        tasks = pa.table(
            {
                "task_index": pa.array(list(self.tasks.values()), pa.int64()),
                "__index_level_0__": pa.array(list(self.tasks), pa.string()),
            }
        )
        pq.write_table(
            tasks.replace_schema_metadata({"pandas": json.dumps(_PANDAS_TASKS_META)}),
            self.root / "meta" / "tasks.parquet",
        )
        n = len(self.rows["action"])
        info = {
            "codebase_version": "v3.0",
            "robot_type": self.robot_type,
            "total_episodes": len(self.episodes),
            "total_frames": n,
            "total_tasks": len(self.tasks),
            "chunks_size": 1000,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200,
            "fps": self.fps,
            "splits": {"train": f"0:{len(self.episodes)}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.video else None,
            "features": features,
        }
        (self.root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
        (self.root / "meta" / "stats.json").write_text(json.dumps(self._stats(n), indent=1))
        return self.root

    def _features(self) -> dict[str, dict]:
        H, W = self.image_shape
        f: dict[str, dict] = {}
        for key in self.cameras:
            f[key] = {
                "dtype": "video" if self.video else "image",
                "shape": [H, W, 3],
                "names": ["height", "width", "channels"],
            }
            if self.video:
                f[key]["info"] = {
                    "video.height": H,
                    "video.width": W,
                    "video.codec": "h264",
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": 3,
                    "has_audio": False,
                }
        if self.state_dim is not None:
            f["observation.state"] = {"dtype": "float32", "shape": [self.state_dim], "names": None}
        f["action"] = {"dtype": "float32", "shape": [self.action_dim], "names": None}
        f["next.success"] = {"dtype": "bool", "shape": [1], "names": None}
        for key, dtype in (
            ("timestamp", "float32"),
            ("frame_index", "int64"),
            ("episode_index", "int64"),
            ("index", "int64"),
            ("task_index", "int64"),
        ):
            f[key] = {"dtype": dtype, "shape": [1], "names": None}
        return f

    def _stats(self, n: int) -> dict[str, dict]:
        stats: dict[str, dict] = {}
        for key, (s, s2, lo, hi) in self._image_sums.items():
            mean = s / (n * self.image_shape[0] * self.image_shape[1])
            std = np.sqrt(np.maximum(s2 / (n * self.image_shape[0] * self.image_shape[1]) - mean**2, 0))
            stats[key] = {
                k: v.reshape(3, 1, 1).tolist() for k, v in (("min", lo), ("max", hi), ("mean", mean), ("std", std))
            }
            stats[key]["count"] = [n]
        for key, values in self.rows.items():
            if key in self.cameras or (key == "observation.state" and self.state_dim is None):
                continue
            x = np.asarray(values, np.float64).reshape(n, -1)
            stats[key] = {
                "min": x.min(0).tolist(),
                "max": x.max(0).tolist(),
                "mean": x.mean(0).tolist(),
                "std": x.std(0).tolist(),
                "count": [n],
                "q01": np.quantile(x, 0.01, 0).tolist(),
                "q99": np.quantile(x, 0.99, 0).tolist(),
            }
        return stats


_PANDAS_TASKS_META = {
    "index_columns": ["__index_level_0__"],
    "column_indexes": [
        {
            "name": None,
            "field_name": None,
            "pandas_type": "unicode",
            "numpy_type": "object",
            "metadata": {"encoding": "UTF-8"},
        }
    ],
    "columns": [
        {
            "name": "task_index",
            "field_name": "task_index",
            "pandas_type": "int64",
            "numpy_type": "int64",
            "metadata": None,
        },
        {
            "name": None,
            "field_name": "__index_level_0__",
            "pandas_type": "unicode",
            "numpy_type": "object",
            "metadata": None,
        },
    ],
    "creator": {"library": "pyarrow", "version": "14"},
    "pandas_version": "2.2.0",
}


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()
