"""Reads LeRobot datasets from disk: ``meta/info.json``, parquet frames (pyarrow), videos decoded on demand (PyAV).

Codebase versions v3.0 (many episodes per parquet / mp4 file, located through ``meta/episodes/``) and v2.0 / v2.1
(one parquet and one mp4 per episode, ``meta/episodes.jsonl``). A camera feature is ``dtype: video`` (frames in an
mp4, at ``from_timestamp + timestamp`` of the episode's row) or ``dtype: image`` (PNG / JPEG bytes in the parquet).
Nothing is downloaded: ``root`` is a local copy (e.g. ``huggingface-cli download --repo-type dataset ...``).
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

SUPPORTED_VERSIONS = ("v3.0", "v2.1", "v2.0")
INSTALL_HINT = "pip install 'rlinf-core[lerobot]' (pyarrow and PyAV)"


class LeRobotFormatError(ValueError):
    """A LeRobot dataset that rlinf cannot use (one-line cause and hint)."""


def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(f"reading LeRobot datasets needs pyarrow: {INSTALL_HINT}") from e
    return pq


class LeRobotReader:
    """One LeRobot dataset on disk, read episode by episode.

    Args:
        root: the dataset directory (holding ``meta/info.json``).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        info_path = self.root / "meta" / "info.json"
        if not info_path.is_file():
            raise LeRobotFormatError(f"{self.root} is not a LeRobot dataset (no meta/info.json); pass the dataset root")
        self.info: dict[str, Any] = json.loads(info_path.read_text())
        self.version = str(self.info.get("codebase_version"))
        if self.version not in SUPPORTED_VERSIONS:
            raise LeRobotFormatError(
                f"{self.root}: LeRobot codebase_version {self.version} is not supported (rlinf reads "
                f"{', '.join(SUPPORTED_VERSIONS)}); convert it with lerobot's dataset conversion scripts"
            )
        self.features: dict[str, dict] = self.info["features"]
        self.fps = float(self.info["fps"])
        self.episodes, self.tasks = self._read_v3_meta() if self.version == "v3.0" else self._read_v2_meta()
        self._table = functools.lru_cache(maxsize=2)(self._read_table)
        self.rows = functools.lru_cache(maxsize=4)(self._rows)

    def __getstate__(self):  # DataLoader workers (spawn) get empty caches
        return {k: v for k, v in self.__dict__.items() if k not in ("_table", "rows")}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._table = functools.lru_cache(maxsize=2)(self._read_table)
        self.rows = functools.lru_cache(maxsize=4)(self._rows)

    # ------------------------------------------------------------------ metadata
    def _read_v3_meta(self) -> tuple[list[dict], dict[int, str]]:
        pq = _pyarrow()
        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise LeRobotFormatError(f"{self.root}: no meta/episodes/chunk-*/file-*.parquet (an unfinalised dataset?)")
        keep = None  # the per-episode stats columns are not needed
        episodes: list[dict] = []
        for f in files:
            names = pq.read_schema(f).names
            keep = [n for n in names if not n.startswith("stats/")]
            episodes.extend(pq.read_table(f, columns=keep).to_pylist())
        episodes.sort(key=lambda e: e["episode_index"])
        table = pq.read_table(self.root / "meta" / "tasks.parquet").to_pylist()
        tasks = {int(r["task_index"]): str(r.get("task", r.get("__index_level_0__"))) for r in table}
        return episodes, tasks

    def _read_v2_meta(self) -> tuple[list[dict], dict[int, str]]:
        def jsonl(name: str) -> list[dict]:
            path = self.root / "meta" / name
            if not path.is_file():
                raise LeRobotFormatError(f"{self.root}: a {self.version} dataset needs meta/{name}")
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

        tasks = {int(r["task_index"]): str(r["task"]) for r in jsonl("tasks.jsonl")}
        episodes = sorted(jsonl("episodes.jsonl"), key=lambda e: e["episode_index"])
        return episodes, tasks

    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Feature statistics as arrays (``{feature: {"mean", "std", "min", "max", "count", "q01", ...}}``).

        ``meta/stats.json`` (v3.0, v2.0); a v2.1 dataset's ``meta/episodes_stats.jsonl`` is aggregated (count-weighted
        mean and variance, min of mins, max of maxes); ``{}`` when the dataset has neither.
        """
        path = self.root / "meta" / "stats.json"
        if path.is_file():
            raw = json.loads(path.read_text())
            return {
                k: {s: np.asarray(v, np.float32) for s, v in d.items()} for k, d in raw.items() if isinstance(d, dict)
            }
        per_episode = self.root / "meta" / "episodes_stats.jsonl"
        if not per_episode.is_file():
            return {}
        parts: dict[str, list[dict[str, np.ndarray]]] = {}
        for line in per_episode.read_text().splitlines():
            if line.strip():
                for key, d in json.loads(line)["stats"].items():
                    parts.setdefault(key, []).append({s: np.asarray(v, np.float64) for s, v in d.items()})
        out = {}
        for key, eps in parts.items():
            n = np.array([float(np.sum(e["count"])) for e in eps])
            w = (n / n.sum()).reshape(-1, *([1] * eps[0]["mean"].ndim))
            means, stds = np.stack([e["mean"] for e in eps]), np.stack([e["std"] for e in eps])
            mean = (w * means).sum(0)
            var = (w * (stds**2 + means**2)).sum(0) - mean**2
            out[key] = {
                "mean": mean,
                "std": np.sqrt(np.maximum(var, 0)),
                "min": np.min([e["min"] for e in eps], 0),
                "max": np.max([e["max"] for e in eps], 0),
                "count": np.array([n.sum()]),
            }
            out[key] = {s: v.astype(np.float32) for s, v in out[key].items()}
        return out

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def length(self, e: int) -> int:
        return int(self.episodes[e]["length"])

    def camera_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    def require(self, key: str, role: str) -> dict:
        """The feature ``key`` (one-line error naming the features there are)."""
        if key not in self.features:
            raise LeRobotFormatError(
                f"{self.root}: no feature {key!r} for {role}; the dataset has {sorted(self.features)} "
                "(set the mapping's keys, or a preset that fits)"
            )
        return self.features[key]

    # ------------------------------------------------------------------ frames
    def _data_file(self, e: int) -> Path:
        ep = self.episodes[e]
        if self.version == "v3.0":
            rel = self.info["data_path"].format(chunk_index=ep["data/chunk_index"], file_index=ep["data/file_index"])
        else:
            chunk = ep["episode_index"] // int(self.info.get("chunks_size", 1000))
            rel = self.info["data_path"].format(episode_chunk=chunk, episode_index=ep["episode_index"])
        return self.root / rel

    def _read_table(self, path: Path):
        if not path.is_file():
            raise LeRobotFormatError(f"{self.root}: data file {path.relative_to(self.root)} is missing")
        return _pyarrow().read_table(path)

    def _rows(self, e: int):
        """The episode's rows of its parquet file (a pyarrow Table, in frame order)."""
        import pyarrow.compute as pc

        table = self._table(self._data_file(e))
        index = self.episodes[e]["episode_index"]
        rows = table.filter(pc.equal(table["episode_index"], index)) if self.version == "v3.0" else table
        rows = rows.sort_by("frame_index")
        if rows.num_rows != self.length(e):
            raise LeRobotFormatError(
                f"{self.root}: episode {index} has {rows.num_rows} rows in {self._data_file(e).name}, "
                f"its metadata says {self.length(e)}"
            )
        return rows

    def column(self, e: int, key: str, role: str = "a column") -> np.ndarray:
        """``float32`` / ``int`` / ``bool`` values ``[T, *shape]`` of a non-image feature, checked against its shape."""
        feature = self.require(key, role)
        col = self.rows(e).column(key).combine_chunks()
        if hasattr(col, "flatten") and hasattr(col.type, "value_type"):  # (fixed-size) list: one vector per row
            arr = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)
        else:
            arr = col.to_numpy(zero_copy_only=False)
        shape = tuple(feature.get("shape") or ())
        T = self.length(e)
        if arr.shape[1:] != shape and not (shape == (1,) and arr.shape == (T,)):
            raise LeRobotFormatError(
                f"{self.root}: feature {key!r} ({role}) has values of shape {arr.shape[1:]}, info.json says {shape}"
            )
        dtype = {"float32": np.float32, "float64": np.float32, "bool": bool}.get(feature.get("dtype"), arr.dtype)
        return arr.reshape(T, *shape).astype(dtype) if shape != (1,) else arr.reshape(T).astype(dtype)

    def task(self, e: int) -> str:
        ep = self.episodes[e]
        tasks = ep.get("tasks") or []
        if tasks:
            return str(tasks[0])
        first = int(self.rows(e).column("task_index")[0].as_py())
        return self.tasks.get(first, "")

    def frames(self, e: int, key: str, role: str = "a camera") -> np.ndarray:
        """``uint8 [T, H, W, 3]`` frames of camera feature ``key`` for episode ``e`` (videos decoded now)."""
        feature = self.require(key, role)
        dtype = feature.get("dtype")
        if dtype == "image":
            out = np.stack([_decode_image(v) for v in self.rows(e).column(key).to_pylist()])
        elif dtype == "video":
            out = self._video_frames(e, key)
        else:
            raise LeRobotFormatError(f"{self.root}: feature {key!r} ({role}) is {dtype}, not a camera (image / video)")
        shape = tuple(feature.get("shape") or ())
        if out.shape[1:] != shape:
            hint = "" if out.shape[1:] != shape[::-1] else " (channel-first shapes are not supported)"
            raise LeRobotFormatError(
                f"{self.root}: camera {key!r} frames are {out.shape[1:]}, info.json says {shape}{hint}"
            )
        return out

    def _video_frames(self, e: int, key: str) -> np.ndarray:
        try:
            import av
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(f"decoding LeRobot videos needs PyAV: {INSTALL_HINT}") from err
        ep = self.episodes[e]
        if self.version == "v3.0":
            rel = self.info["video_path"].format(
                video_key=key, chunk_index=ep[f"videos/{key}/chunk_index"], file_index=ep[f"videos/{key}/file_index"]
            )
            start = float(ep[f"videos/{key}/from_timestamp"])
        else:
            chunk = ep["episode_index"] // int(self.info.get("chunks_size", 1000))
            rel = self.info["video_path"].format(video_key=key, episode_chunk=chunk, episode_index=ep["episode_index"])
            start = 0.0
        path = self.root / rel
        if not path.is_file():
            raise LeRobotFormatError(f"{self.root}: video {rel} of camera {key!r} is missing")
        wanted = start + self.rows(e).column("timestamp").to_numpy().astype(np.float64)
        tol = 0.5 / self.fps
        times, images = [], []
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            if start > 0:
                container.seek(int(max(start - 1.0, 0.0) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.time)
                if t < wanted[0] - tol:
                    continue
                if t > wanted[-1] + tol:
                    break
                times.append(t)
                images.append(frame.to_ndarray(format="rgb24"))
        times_arr = np.asarray(times)
        if not len(times_arr):
            raise LeRobotFormatError(
                f"{self.root}: no frames of {rel} near timestamps {wanted[0]:.3f}..{wanted[-1]:.3f}"
            )
        nearest = np.abs(times_arr[None, :] - wanted[:, None]).argmin(1)
        off = np.abs(times_arr[nearest] - wanted).max()
        if off > tol:
            raise LeRobotFormatError(
                f"{self.root}: {rel} has no frame within {tol:.3f} s of a row's timestamp ({off:.3f} s)"
            )
        return np.stack([images[i] for i in nearest])


def _decode_image(value: Any) -> np.ndarray:
    """An ``image`` feature's cell (``{"bytes", "path"}`` as ``datasets`` stores it) as ``uint8 [H, W, 3]``."""
    from PIL import Image

    data = value.get("bytes") if isinstance(value, dict) else value
    if data is None and isinstance(value, dict) and value.get("path"):
        return np.asarray(Image.open(value["path"]).convert("RGB"))
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
