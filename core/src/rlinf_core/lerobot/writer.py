"""Writes LeRobot datasets (codebase version v3.0) that lerobot's loader, visualiser and edit tools open and rlinf
reads back, in pieces that survive a crash.

Layout (as lerobot writes it: many episodes per file, files numbered ``chunk-CCC/file-FFF``)::

    ROOT/meta/info.json                              features, fps, path templates, totals
    ROOT/meta/stats.json                             min / max / mean / std / count / q01 q10 q50 q90 q99
    ROOT/meta/tasks.parquet                          task strings (the pandas index) -> task_index
    ROOT/meta/episodes/chunk-CCC/file-FFF.parquet    per episode: length, rows, video time span, tasks, stats/*
    ROOT/data/chunk-CCC/file-FFF.parquet             one row per frame
    ROOT/videos/<camera>/chunk-CCC/file-FFF.mp4      H.264 (yuv420p), or PNG ``image`` features with video=False

**Pieces.** Every ``episodes_per_file`` episodes (and at :meth:`close`) the writer finishes a piece: piece ``p``'s
data file, one video file per camera and episodes file are all ``chunk-{p // 1000}/file-{p % 1000}``, written
under ``ROOT/.in_progress/`` and renamed into place (videos, data, episodes), then ``tasks.parquet``, ``stats.json``
and ``info.json`` are rewritten for every finished piece (each file replaced atomically, ``info.json`` last). What is
on disk between pieces is a complete dataset of the finished pieces, so a process killed outright (``kill -9``, a
lost machine) loses at most the piece being written. ``ROOT/.in_progress/`` holds that piece and a lock held while a
writer is open; :meth:`close` removes it.

**Resuming.** ``LeRobotWriter(root, ..., resume=True)`` continues a dataset this writer made (finished, or cut
short: the unfinished piece and any file of it already renamed are dropped, the metadata rewritten for the finished
pieces), with the same features and fps; its next episodes get the next indices and files. A dataset that another
open writer is writing is refused (its lock).

**Statistics.** Each episode's ``stats/<feature>/<stat>`` columns in the episodes parquet (the columns lerobot's
``save_episode`` writes and its ``lerobot-edit-dataset`` re-aggregates), and ``stats.json``: ``min``, ``max``,
``mean``, ``std``, ``count`` and the quantiles ``q01``, ``q10``, ``q50``, ``q90``, ``q99`` of every feature (images
per channel in [0, 1], shape ``(3, 1, 1)``). Episode statistics are exact (every frame; quantiles as
``numpy.quantile``); ``stats.json`` is exact for vectors (over every row) and for the images' min / max / mean /
std, while the images' quantiles are lerobot's aggregation (the count-weighted mean of the episodes' quantiles).

Feature names are the ``"rlinf"`` preset of :mod:`rlinf_core.lerobot.mapping`: ``observation.images.image``,
``observation.images.wrist_image``, ``observation.state``, ``action``, ``next.success``. Row ``t`` pairs the
observation before step ``t`` with the action taken there (LeRobot's and ``rlinf-demos``' convention).
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from rlinf_core.lerobot.mapping import PRESETS
from rlinf_core.lerobot.reader import INSTALL_HINT

__all__ = ["LeRobotWriter", "QUANTILES", "dataset_state"]

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
CAMERAS = PRESETS["rlinf"].camera_keys
CHUNKS_SIZE = 1000  # files per chunk directory (lerobot's default)
IN_PROGRESS = ".in_progress"
#: the quantiles lerobot writes (``compute_stats.DEFAULT_QUANTILES``), named ``q01`` ... ``q99``
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_Q_NAMES = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
_INDEX_COLUMNS = ("frame_index", "episode_index", "index", "task_index")


def dataset_state(root: str | Path) -> str:
    """What ``root`` holds: ``"absent"`` (no dataset), ``"finished"`` (closed by its writer), ``"writing"`` (a live
    writer holds its lock) or ``"cut"`` (its writer stopped before :meth:`LeRobotWriter.close`: a crash or
    ``kill -9``; it holds the pieces finished before, and ``resume=True`` continues it)."""
    root = Path(root)
    if not (root / IN_PROGRESS).is_dir():
        return "finished" if (root / "meta" / "info.json").is_file() else "absent"
    lock = _try_lock(root / IN_PROGRESS / "lock")
    if lock is None:
        return "writing"
    os.close(lock)
    return "cut"


class LeRobotWriter:
    """Writes episodes as they come, finishing a piece of the dataset every ``episodes_per_file`` episodes;
    :meth:`close` finishes the last one.

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
        episodes_per_file: episodes per data / video file: a killed process loses at most this many minus one.
        resume: continue the dataset in ``root`` (finished or cut short) instead of refusing it.
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
        episodes_per_file: int = 100,
        resume: bool = False,
    ) -> None:
        self.root = Path(root)
        H, W = image_shape
        if video and (H % 2 or W % 2):
            raise ValueError(f"H.264 (yuv420p) needs an even image size, got {H}x{W}: use video=False or resize")
        if episodes_per_file < 1:
            raise ValueError(f"episodes_per_file must be >= 1, got {episodes_per_file}")
        self.fps, self.action_dim, self.state_dim, self.image_shape = int(fps), action_dim, state_dim, (H, W)
        self.cameras = CAMERAS[:2] if wrist_camera else CAMERAS[:1]
        self.video, self.robot_type, self.episodes_per_file = video, robot_type, episodes_per_file
        self.features = self._features()
        state = dataset_state(self.root)
        if state == "writing":
            raise FileExistsError(f"{self.root} is being written by another process (its {IN_PROGRESS}/lock is held)")
        if state != "absent" and overwrite:
            for sub in ("meta", "data", "videos", IN_PROGRESS):
                shutil.rmtree(self.root / sub, ignore_errors=True)
            state = "absent"
        elif state in ("finished", "cut") and not resume:
            how = "was cut before it was finished" if state == "cut" else "already holds a LeRobot dataset"
            raise FileExistsError(
                f"{self.root} {how}; pass resume=True to append to it or overwrite=True (--overwrite) to replace it"
            )
        self._work = self.root / IN_PROGRESS
        self._work.mkdir(parents=True, exist_ok=True)
        self._lock = _try_lock(self._work / "lock")
        if self._lock is None:
            raise FileExistsError(f"{self.root} is being written by another process (its {IN_PROGRESS}/lock is held)")
        self.episodes: list[dict[str, Any]] = []  # finished pieces' episodes (their episodes-parquet rows)
        self.tasks: dict[str, int] = {}
        self._vectors: dict[str, list[np.ndarray]] = {k: [] for k in self._vector_keys()}  # finished rows
        self._piece = 0  # index of the piece being written
        self._closed = False
        if state != "absent" and resume:
            self._resume()
        self._new_piece()

    # ------------------------------------------------------------------ episodes
    @property
    def num_episodes(self) -> int:
        """Episodes added so far (finished pieces and the current one)."""
        return len(self.episodes) + len(self._pending)

    @property
    def num_frames(self) -> int:
        return self._first_row + len(self._rows["action"])

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
        index. Every ``episodes_per_file``-th episode finishes a piece on disk."""
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
            cams[key] = frames
        if self.state_dim is not None:
            states = np.asarray(states, np.float32).reshape(T, -1)
            if states.shape[1] != self.state_dim:
                raise ValueError(f"states must be [T, {self.state_dim}], got {states.shape}")
        success = np.zeros(T, bool) if success is None else np.asarray(success, bool).reshape(T)
        e, start = self.num_episodes, self.num_frames
        task_index = self.tasks.setdefault(task, len(self.tasks))
        columns: dict[str, np.ndarray] = {
            "action": actions,
            "next.success": success,
            "timestamp": (np.arange(T) / self.fps).astype(np.float32),
            "frame_index": np.arange(T, dtype=np.int64),
            "episode_index": np.full(T, e, np.int64),
            "index": np.arange(start, start + T, dtype=np.int64),
            "task_index": np.full(T, task_index, np.int64),
        }
        if self.state_dim is not None:
            columns["observation.state"] = states
        for key, frames in cams.items():
            if self.video:
                self._encode(key, frames)
            else:
                self._rows[key].extend({"bytes": _png(f), "path": None} for f in frames)
        for key, values in columns.items():
            self._rows[key].extend(values)
        chunk, file = self._piece // CHUNKS_SIZE, self._piece % CHUNKS_SIZE
        entry: dict[str, Any] = {
            "episode_index": e,
            "tasks": [task],
            "length": T,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": start,
            "dataset_to_index": start + T,
        }
        if self.video:
            t0 = self._frames_in_video / self.fps
            for key in self.cameras:
                entry.update(
                    {
                        f"videos/{key}/chunk_index": chunk,
                        f"videos/{key}/file_index": file,
                        f"videos/{key}/from_timestamp": t0,
                        f"videos/{key}/to_timestamp": t0 + T / self.fps,
                    }
                )
            self._frames_in_video += T
        for key, frames in cams.items():
            entry.update(_flat_stats(key, _image_stats(frames)))
        for key in self._vector_keys():
            entry.update(_flat_stats(key, _vector_stats(columns[key], self.features[key]["dtype"])))
        entry.update({"meta/episodes/chunk_index": chunk, "meta/episodes/file_index": file})
        self._pending.append(entry)
        if len(self._pending) >= self.episodes_per_file:
            self.flush()
        return e

    def _encode(self, key: str, frames: np.ndarray) -> None:
        try:
            import av
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(f"writing LeRobot videos needs PyAV: {INSTALL_HINT}") from err
        if key not in self._encoders:
            container = av.open(str(self._work / f"{key}.mp4"), "w")
            stream = container.add_stream("libx264", rate=self.fps, options={"crf": "18", "g": "2", "preset": "fast"})
            stream.height, stream.width = self.image_shape
            stream.pix_fmt = "yuv420p"
            self._encoders[key] = (container, stream)
        container, stream = self._encoders[key]
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))

    # ------------------------------------------------------------------ pieces
    def _new_piece(self) -> None:
        self._pending: list[dict[str, Any]] = []
        self._rows: dict[str, list] = {k: [] for k in (*self._vector_keys(), *([] if self.video else self.cameras))}
        self._encoders: dict[str, tuple] = {}
        self._frames_in_video = 0
        self._first_row = sum(int(e["length"]) for e in self.episodes)

    def flush(self) -> None:
        """Finish the current piece now (a no-op without episodes): its files are renamed into place and the
        metadata rewritten, so that what is on disk is a complete dataset of every episode added so far."""
        if not self._pending:
            return
        pa, pq = _pyarrow()
        chunk, file = self._piece // CHUNKS_SIZE, self._piece % CHUNKS_SIZE
        where = {"chunk_index": chunk, "file_index": file}
        for container, stream in self._encoders.values():
            container.mux(stream.encode(None))
            container.close()
        moves = [
            (self._work / f"{key}.mp4", self.root / VIDEO_PATH.format(video_key=key, **where)) for key in self._encoders
        ]
        data = self._work / "data.parquet"
        pq.write_table(pa.table(self._columns(pa)), data)
        episodes = self._work / "episodes.parquet"
        pq.write_table(_episodes_table(pa, self._pending), episodes)
        moves += [(data, self.root / DATA_PATH.format(**where)), (episodes, self.root / EPISODES_PATH.format(**where))]
        for src, dst in moves:  # the episodes file last: until it exists the piece is not part of the dataset
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        for key in self._vector_keys():
            if self._rows[key]:
                self._vectors[key].append(np.stack(self._rows[key]))
        self.episodes.extend(self._pending)
        self._piece += 1
        self._write_meta()
        self._new_piece()

    def close(self) -> Path:
        """Finish the last piece and remove the work directory; returns the dataset root."""
        if self._closed:
            return self.root
        self._closed = True
        try:
            self.flush()
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None
            shutil.rmtree(self._work, ignore_errors=True)
        if not self.episodes:
            if self.root.is_dir() and not any(self.root.iterdir()):
                self.root.rmdir()
            raise ValueError(f"{self.root}: no episode was added")
        return self.root

    def _columns(self, pa) -> dict[str, Any]:
        columns = {}
        for key, values in self._rows.items():
            if key in ("action", "observation.state"):
                flat = pa.array(np.asarray(values, np.float32).reshape(-1))
                columns[key] = pa.FixedSizeListArray.from_arrays(flat, self.features[key]["shape"][0])
            elif key in self.cameras:
                columns[key] = pa.array(values, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
            else:
                dtype = {"next.success": pa.bool_(), "timestamp": pa.float32()}.get(key, pa.int64())
                columns[key] = pa.array(np.asarray(values), dtype)
        return columns

    # ------------------------------------------------------------------ metadata
    def _write_meta(self) -> None:
        pa, pq = _pyarrow()
        tasks = pa.table(
            {
                "task_index": pa.array(list(self.tasks.values()), pa.int64()),
                "__index_level_0__": pa.array(list(self.tasks), pa.string()),
            }
        )
        tmp = self._work / "tasks.parquet"
        pq.write_table(tasks.replace_schema_metadata({"pandas": json.dumps(_PANDAS_TASKS_META)}), tmp)
        (self.root / "meta").mkdir(parents=True, exist_ok=True)
        os.replace(tmp, self.root / "meta" / "tasks.parquet")
        n = sum(int(e["length"]) for e in self.episodes)
        _write_json(self.root / "meta" / "stats.json", self._stats(n), self._work, indent=1)
        info = {
            "codebase_version": "v3.0",
            "robot_type": self.robot_type,
            "total_episodes": len(self.episodes),
            "total_frames": n,
            "total_tasks": len(self.tasks),
            "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200,
            "fps": self.fps,
            "splits": {"train": f"0:{len(self.episodes)}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.video else None,
            "features": self.features,
        }
        _write_json(self.root / "meta" / "info.json", info, self._work, indent=4)

    def _vector_keys(self) -> list[str]:
        keys = ["action", "next.success", "timestamp", *_INDEX_COLUMNS]
        return (["observation.state"] if self.state_dim is not None else []) + keys

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
        for key, dtype in (("timestamp", "float32"), *((k, "int64") for k in _INDEX_COLUMNS)):
            f[key] = {"dtype": dtype, "shape": [1], "names": None}
        return f

    def _stats(self, n: int) -> dict[str, dict]:
        stats: dict[str, dict] = {}
        for key in self.cameras:
            stats[key] = _aggregate_image_stats([_unflat_stats(e, key) for e in self.episodes])
        for key in self._vector_keys():
            stats[key] = _jsonable(_vector_stats(np.concatenate(self._vectors[key]), self.features[key]["dtype"]))
        return stats

    # ------------------------------------------------------------------ resuming
    def _resume(self) -> None:
        """Load the finished pieces of the dataset in ``root``; drop files of an unfinished piece; rewrite its
        metadata (a cut dataset's may describe fewer pieces than are on disk)."""
        pa, pq = _pyarrow()
        info_path = self.root / "meta" / "info.json"
        if info_path.is_file():
            info = json.loads(info_path.read_text())
            theirs = info.get("features", {})
            same = info.get("codebase_version") == "v3.0" and int(info.get("fps", -1)) == self.fps
            if not same or theirs != self.features:
                differ = sorted(k for k in set(theirs) | set(self.features) if theirs.get(k) != self.features.get(k))
                raise ValueError(
                    f"{self.root} cannot be resumed by this writer: its fps ({info.get('fps')} vs {self.fps}) or "
                    f"features differ ({', '.join(differ) or 'none'}); write to another directory"
                )
        pieces = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        episodes: list[dict[str, Any]] = []
        for path in pieces:
            rows = pq.read_table(path).to_pylist()
            data = self.root / DATA_PATH.format(
                chunk_index=rows[0]["data/chunk_index"], file_index=rows[0]["data/file_index"]
            )
            videos = [
                self.root
                / VIDEO_PATH.format(
                    video_key=k,
                    chunk_index=rows[0][f"videos/{k}/chunk_index"],
                    file_index=rows[0][f"videos/{k}/file_index"],
                )
                for k in self.cameras
                if self.video
            ]
            if not data.is_file() or not all(v.is_file() for v in videos):
                break  # a piece whose files are gone ends the finished ones
            episodes.extend(rows)
        kept = {(int(e["data/chunk_index"]), int(e["data/file_index"])) for e in episodes}
        for pattern in (DATA_PATH, EPISODES_PATH, *(VIDEO_PATH.replace("{video_key}", k) for k in self.cameras)):
            folder = self.root / pattern.split("/chunk-")[0]
            for path in folder.glob(f"chunk-*/file-*.{pattern.rsplit('.', 1)[1]}"):
                index = (int(path.parent.name.split("-")[1]), int(path.stem.split("-")[1]))
                if index not in kept:
                    path.unlink()  # a file of the piece that was being written when the writer stopped
        order = sorted(kept)
        for number, (chunk, file) in enumerate(order):
            if (chunk, file) != (number // CHUNKS_SIZE, number % CHUNKS_SIZE):
                raise ValueError(
                    f"{self.root}: its files are not numbered as this writer numbers them; write to another directory"
                )
        for chunk, file in order:
            table = pq.read_table(self.root / DATA_PATH.format(chunk_index=chunk, file_index=file))
            for key in self._vector_keys():
                col = table.column(key).combine_chunks()
                if key in ("action", "observation.state"):
                    values = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)
                else:
                    values = col.to_numpy(zero_copy_only=False)
                self._vectors[key].append(values)
            firsts = dict(zip(table.column("episode_index").to_pylist(), table.column("task_index").to_pylist()))
            for e in (e for e in episodes if (e["data/chunk_index"], e["data/file_index"]) == (chunk, file)):
                self.tasks.setdefault(str(e["tasks"][0]), int(firsts[e["episode_index"]]))
        if sorted(self.tasks.values()) != list(range(len(self.tasks))):
            raise ValueError(
                f"{self.root}: its task indices are not 0..{len(self.tasks) - 1}; write to another directory"
            )
        self.episodes = episodes
        self._piece = len(order)
        if episodes:
            self._write_meta()
        else:
            for sub in ("meta", "data", "videos"):
                shutil.rmtree(self.root / sub, ignore_errors=True)


# ---------------------------------------------------------------------- statistics
def _vector_stats(values: np.ndarray, dtype: str) -> dict[str, np.ndarray]:
    """lerobot's per-feature statistics of ``[N]`` or ``[N, D]`` values: min / max in the feature's dtype, the rest
    float64 (quantiles as ``numpy.quantile``, linear); every entry a 1-D array, ``count`` ``[N]``."""
    x = np.asarray(values)
    x = x.reshape(len(x), -1)
    f = x.astype(np.float64)
    out = {"min": x.min(0), "max": x.max(0), "mean": f.mean(0), "std": f.std(0), "count": np.array([len(x)])}
    if dtype == "float32":
        out["min"], out["max"] = out["min"].astype(np.float64), out["max"].astype(np.float64)
    for name, q in zip(_Q_NAMES, np.quantile(f, QUANTILES, axis=0)):
        out[name] = q
    return out


def _image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel statistics of ``uint8 [T, H, W, 3]`` frames in [0, 1], each ``(3, 1, 1)`` (``count`` ``[T]``);
    quantiles exact from the 256-bin histogram (equal to ``numpy.quantile`` of every pixel value)."""
    pixels = frames.reshape(-1, 3)
    hist = np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(3)])  # [3, 256]
    levels = np.arange(256, dtype=np.float64)
    n = hist.sum(1)
    mean = hist @ levels / n
    var = np.maximum(hist @ levels**2 / n - mean**2, 0.0)
    nonzero = hist > 0
    out = {
        "min": levels[nonzero.argmax(1)],
        "max": 255 - levels[nonzero[:, ::-1].argmax(1)],
        "mean": mean,
        "std": np.sqrt(var),
    }
    out = {k: (v / 255.0).reshape(3, 1, 1) for k, v in out.items()}
    out["count"] = np.array([len(frames)])
    for name, q in zip(_Q_NAMES, QUANTILES):
        out[name] = (np.array([_histogram_quantile(h, q) for h in hist]) / 255.0).reshape(3, 1, 1)
    return out


def _histogram_quantile(hist: np.ndarray, q: float) -> float:
    """``numpy.quantile(values, q)`` (linear interpolation) of the integer values that ``hist`` counts."""
    cum = np.cumsum(hist)
    pos = q * (cum[-1] - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    v_lo, v_hi = np.searchsorted(cum, lo, side="right"), np.searchsorted(cum, hi, side="right")
    return float(v_lo + (pos - lo) * (v_hi - v_lo))


def _aggregate_image_stats(parts: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """Episodes' image statistics combined as lerobot's ``aggregate_stats`` combines them."""
    counts = np.array([float(p["count"][0]) for p in parts]).reshape(-1, 1, 1, 1)
    means, stds = np.stack([p["mean"] for p in parts]), np.stack([p["std"] for p in parts])
    total = counts.sum()
    mean = (means * counts).sum(0) / total
    var = ((stds**2 + (means - mean) ** 2) * counts).sum(0) / total
    out = {
        "min": np.min([p["min"] for p in parts], 0),
        "max": np.max([p["max"] for p in parts], 0),
        "mean": mean,
        "std": np.sqrt(var),
        "count": np.array([int(total)]),
    }
    for name in _Q_NAMES:
        out[name] = (np.stack([p[name] for p in parts]) * counts).sum(0) / total
    return _jsonable(out)


def _flat_stats(key: str, stats: dict[str, np.ndarray]) -> dict[str, Any]:
    return {f"stats/{key}/{name}": value.tolist() for name, value in stats.items()}


def _unflat_stats(entry: dict[str, Any], key: str) -> dict[str, np.ndarray]:
    prefix = f"stats/{key}/"
    return {k[len(prefix) :]: np.asarray(v, np.float64) for k, v in entry.items() if k.startswith(prefix)}


def _jsonable(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: np.asarray(v).tolist() for k, v in stats.items()}


def _episodes_table(pa, entries: list[dict[str, Any]]):
    """The episodes parquet of one piece, with the column types lerobot writes (``stats/*`` lists included)."""
    return pa.Table.from_pylist(entries)


# ---------------------------------------------------------------------- files
def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:  # pragma: no cover
        raise ImportError(f"writing LeRobot datasets needs pyarrow: {INSTALL_HINT}") from err
    return pa, pq


def _write_json(path: Path, value: Any, work: Path, indent: int) -> None:
    tmp = work / path.name
    tmp.write_text(json.dumps(value, indent=indent))
    os.replace(tmp, path)


def _try_lock(path: Path) -> int | None:
    """An open file descriptor holding an exclusive ``flock`` on ``path`` (created), or ``None`` when another
    process holds it (the lock goes with the process, however it ends)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


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
