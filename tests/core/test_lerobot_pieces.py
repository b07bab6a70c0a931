"""LeRobot datasets written in pieces: what a killed writer leaves is a complete dataset of its finished pieces,
the next writer continues it, and every episode carries lerobot's per-episode ``stats/*`` columns (all five
quantiles), so that lerobot's own edit tools keep the statistics. Checked here with rlinf's reader and pyarrow; the
real lerobot's check is recorded in docs/lerobot.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rlinf_core.lerobot.reader import LeRobotReader
from rlinf_core.lerobot.writer import QUANTILES, LeRobotWriter, dataset_state

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lerobot" / "dataset"
CAMERA = "observation.images.image"
STATS = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")


def episode(e: int, length: int = 6, size: int = 16) -> dict:
    """Seeded frames (a gradient with a moving square), actions, states and success of episode ``e``."""
    rng = np.random.default_rng(e)
    y, x = np.mgrid[0:size, 0:size]
    frames = []
    for t in range(length):
        img = np.stack([x * 15, y * 15, np.full_like(x, 40 + 20 * e)], -1).astype(np.uint8)
        r, c = (t + e) % (size - 4), (2 * t + 3 * e) % (size - 4)
        img[r : r + 4, c : c + 4] = 250
        frames.append(img)
    success = np.zeros(length, bool)
    success[-1] = e % 2 == 0
    return {"images": np.stack(frames), "actions": rng.uniform(-1, 1, (length, 2)).astype(np.float32),
            "task": f"task {e % 3}", "states": rng.normal(size=(length, 3)).astype(np.float32),
            "success": success}  # fmt: skip


def write(root: Path, episodes: range, **kw) -> LeRobotWriter:
    writer = LeRobotWriter(root, fps=10, action_dim=2, state_dim=3, image_shape=(16, 16), **kw)
    for e in episodes:
        writer.add(**episode(e))
    return writer


def check_episodes(root: Path, indices: list[int], video: bool = True) -> LeRobotReader:
    """rlinf's reader gives back exactly these episodes (frames exact without video)."""
    reader = LeRobotReader(root)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert reader.num_episodes == info["total_episodes"] == len(indices)
    assert info["total_frames"] == sum(reader.length(i) for i in range(len(indices)))
    for i, e in enumerate(indices):
        want = episode(e)
        np.testing.assert_array_equal(reader.column(i, "action"), want["actions"])
        np.testing.assert_array_equal(reader.column(i, "observation.state"), want["states"])
        np.testing.assert_array_equal(reader.column(i, "next.success"), want["success"])
        assert reader.task(i) == want["task"]
        frames = reader.frames(i, CAMERA)
        if video:  # H.264 is lossy (4:2:0 colour at 16 px): each decoded frame is nearest its own source frame
            err = np.abs(frames[:, None].astype(int) - want["images"][None]).mean((2, 3, 4))
            assert (err.argmin(1) == np.arange(len(frames))).all() and err.diagonal().mean() < 8, (e, err)
        else:
            np.testing.assert_array_equal(frames, want["images"])
    return reader


def test_pieces_are_files_of_episodes_per_file_episodes(tmp_path):
    root = tmp_path / "ds"
    write(root, range(5), episodes_per_file=2).close()
    for folder, ext in (("data", "parquet"), (f"videos/{CAMERA}", "mp4"), ("meta/episodes", "parquet")):
        names = sorted(p.relative_to(root / folder).as_posix() for p in (root / folder).rglob(f"*.{ext}"))
        assert names == [f"chunk-000/file-00{i}.{ext}" for i in range(3)], folder
    assert not (root / ".in_progress").exists() and dataset_state(root) == "finished"
    reader = check_episodes(root, list(range(5)))
    assert [(e["data/file_index"], e[f"videos/{CAMERA}/from_timestamp"]) for e in reader.episodes] == [
        (0, 0.0), (0, 0.6), (1, 0.0), (1, 0.6), (2, 0.0)]  # fmt: skip
    tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pylist()
    assert [(t["__index_level_0__"], t["task_index"]) for t in tasks] == [("task 0", 0), ("task 1", 1), ("task 2", 2)]


def test_episode_stats_columns_are_lerobots_with_every_quantile(tmp_path):
    root = tmp_path / "ds"
    write(root, range(3), video=False).close()
    table = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    theirs = pq.read_schema(FIXTURE / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    stats = [f for f in theirs if f.name.startswith("stats/") and "wrist" not in f.name]
    assert {f.name for f in stats} == {n for n in table.schema.names if n.startswith("stats/")}
    for field in stats:  # the column types lerobot 0.4.4 wrote in the fixture
        assert table.schema.field(field.name).type == field.type, field.name
    rows = table.to_pylist()
    for e, row in enumerate(rows):
        want = episode(e)
        actions = want["actions"].astype(np.float64)
        assert row["stats/action/count"] == [6] and row[f"stats/{CAMERA}/count"] == [6]
        np.testing.assert_allclose(row["stats/action/mean"], actions.mean(0))
        np.testing.assert_allclose(row["stats/action/std"], actions.std(0))
        for q in QUANTILES:
            name = f"q{round(q * 100):02d}"
            np.testing.assert_allclose(row[f"stats/action/{name}"], np.quantile(actions, q, axis=0))
            pixels = want["images"].reshape(-1, 3).astype(np.float64) / 255
            got = np.asarray(row[f"stats/{CAMERA}/{name}"]).reshape(3)
            np.testing.assert_allclose(got, np.quantile(pixels, q, axis=0), rtol=0, atol=1e-12)
        assert row["stats/next.success/max"] == [bool(want["success"].any())]
        assert row["stats/episode_index/min"] == row["stats/episode_index/max"] == [e]
    global_stats = json.loads((root / "meta" / "stats.json").read_text())
    actions = np.concatenate([episode(e)["actions"] for e in range(3)]).astype(np.float64)
    for name, q in zip(("q01", "q10", "q50", "q90", "q99"), QUANTILES):
        np.testing.assert_allclose(global_stats["action"][name], np.quantile(actions, q, axis=0))
    for key, per_feature in global_stats.items():
        assert tuple(per_feature) == STATS, key
    # lerobot's aggregation of the episode columns (what lerobot-edit-dataset writes after delete_episodes / split)
    # gives back stats.json's min / max / mean / std
    for key in ("action", "observation.state", CAMERA):
        n = np.array([r[f"stats/{key}/count"][0] for r in rows], float)
        means = np.array([np.asarray(r[f"stats/{key}/mean"]).reshape(-1) for r in rows])
        stds = np.array([np.asarray(r[f"stats/{key}/std"]).reshape(-1) for r in rows])
        mean = (means * n[:, None]).sum(0) / n.sum()
        std = np.sqrt((((stds**2) + (means - mean) ** 2) * n[:, None]).sum(0) / n.sum())
        np.testing.assert_allclose(np.asarray(global_stats[key]["mean"]).reshape(-1), mean, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(global_stats[key]["std"]).reshape(-1), std, rtol=1e-9)


KILLED = """
import sys, time
sys.path.insert(0, {tests!r})
from test_lerobot_pieces import write
writer = write(__import__("pathlib").Path({root!r}), range(0), episodes_per_file=2)
from test_lerobot_pieces import episode
for e in range(5):
    writer.add(**episode(e))
    print(f"added {{e}}", flush=True)
time.sleep(600)
"""


def test_a_killed_writer_leaves_its_finished_pieces_and_the_next_one_continues(tmp_path):
    root = tmp_path / "ds"
    script = textwrap.dedent(KILLED.format(tests=str(Path(__file__).parent), root=str(root)))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    try:
        for line in proc.stdout:
            if line.strip() == "added 4":  # pieces 0 and 1 finished; episode 4 is in the unfinished piece 2
                break
        assert dataset_state(root) == "writing"
        with pytest.raises(FileExistsError, match="being written by another process"):
            write(root, range(0), resume=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert dataset_state(root) == "cut" and (root / ".in_progress" / f"{CAMERA}.mp4").exists()  # unfinished piece
    check_episodes(root, [0, 1, 2, 3])  # a complete dataset of the finished pieces
    with pytest.raises(FileExistsError, match="was cut before it was finished; pass resume=True"):
        write(root, range(0))
    writer = write(root, range(5, 8), episodes_per_file=2, resume=True)
    assert writer.num_episodes == 7
    writer.close()
    reader = check_episodes(root, [0, 1, 2, 3, 5, 6, 7])
    assert [e["episode_index"] for e in reader.episodes] == list(range(7))
    assert sorted(p.name for p in (root / "data" / "chunk-000").iterdir()) == [f"file-00{i}.parquet" for i in range(4)]
    stats = json.loads((root / "meta" / "stats.json").read_text())
    actions = np.concatenate([episode(e)["actions"] for e in (0, 1, 2, 3, 5, 6, 7)]).astype(np.float64)
    np.testing.assert_allclose(stats["action"]["q90"], np.quantile(actions, 0.9, axis=0))
    assert stats["index"]["max"] == [len(actions) - 1] and stats["action"]["count"] == [len(actions)]


def test_a_torn_piece_is_dropped_on_resume(tmp_path):
    """Killed between renaming a piece's data and its episodes file: the piece is not part of the dataset."""
    root = tmp_path / "ds"
    write(root, range(4), episodes_per_file=2).close()
    (root / "meta" / "episodes" / "chunk-000" / "file-001.parquet").unlink()
    (root / ".in_progress").mkdir()
    assert dataset_state(root) == "cut"
    write(root, range(4, 5), resume=True).close()
    check_episodes(root, [0, 1, 4])
    assert not (root / "videos" / CAMERA / "chunk-000" / "file-002.mp4").exists()  # piece 1's files were reused


def test_resuming_with_other_features_is_refused_in_one_line(tmp_path):
    root = tmp_path / "ds"
    write(root, range(1)).close()
    with pytest.raises(ValueError, match=r"cannot be resumed by this writer: .*features differ \(action\)"):
        LeRobotWriter(root, fps=10, action_dim=3, state_dim=3, image_shape=(16, 16), resume=True)
