"""Random-window reads of world-model training data: decoding ``traj*.npy`` files vs the memory-mapped ``cache_dir``.

Writes ``--episodes`` recorded-format episodes of ``--frames`` frames at ``--size``², then reads random
OpenSora windows (4 + 8 frames) through :class:`rlinf_core.world_models.datasets.ClipDataset` with an in-memory cache
smaller than the dataset (``--cache-episodes``, as for any real dataset) and with ``cache_dir``; the first
cache_dir pass (which converts every episode once) is reported separately::

    python benchmarks/bench_wm_data.py [--episodes 8 --frames 200 --size 256 --reads 64]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from rlinf_core.world_models.datasets import ClipDataset  # noqa: E402
from rlinf_core.world_models.init_data import save_init_trajectory  # noqa: E402
from scale_common import fmt_table, load_line  # noqa: E402


def reads_per_s(ds: ClipDataset, n: int, seed: int = 0) -> float:
    order = np.random.default_rng(seed).integers(0, len(ds), n)
    t0 = time.perf_counter()
    for i in order:
        ds[int(i)]
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--reads", type=int, default=64)
    parser.add_argument("--cache-episodes", type=int, default=2)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_wm_data_"))
    rng = np.random.default_rng(0)
    for e in range(args.episodes):
        images = rng.integers(0, 256, (args.frames, args.size, args.size, 3), dtype=np.uint8)
        save_init_trajectory(root / "data" / f"traj{e}.npy", images, "task", rng.normal(size=(args.frames, 7)),
                             np.zeros(args.frames, bool))  # fmt: skip
    mb = sum(p.stat().st_size for p in (root / "data").iterdir()) / 2**20
    print(f"{args.episodes} episodes x {args.frames} frames at {args.size}px ({mb:.0f} MB), {load_line()}")
    kw = dict(num_condition_frames=4, num_target_frames=8, cache_episodes=args.cache_episodes)
    decode = ClipDataset(root / "data", **kw)
    t0 = time.perf_counter()
    mapped = ClipDataset(root / "data", cache_dir=root / "cache", **kw)  # indexing converts every episode once
    convert = time.perf_counter() - t0
    r_decode, r_mapped = reads_per_s(decode, args.reads), reads_per_s(mapped, args.reads)
    rows = [("decode traj*.npy on a cache miss", f"{r_decode:.1f}", "1.00x"),
            ("cache_dir (memory-mapped)", f"{r_mapped:.1f}", f"{r_mapped / r_decode:.1f}x")]  # fmt: skip
    print(fmt_table(rows, ("random 12-frame windows", "reads/s", "vs decode")))
    print(f"cache_dir conversion at indexing: {convert:.1f} s for the whole dataset")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
