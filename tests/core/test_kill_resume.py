"""Exact resume after ``kill -9``: ``rlinf fit`` (toy GRPO config) is killed at random moments (rollout, update,
checkpoint write), resumed with ``--ckpt_path <run dir>`` each time, and every metric every run logged equals the
uninterrupted run's, bit for bit (RNG of every rank, env samplers, LR schedule, step counters restored). Bit for bit
holds because both runs are on one machine with one torch build and thread count, so the same float kernels; on
another CPU both runs round differently from the first step on, and still equal each other there."""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RLINF = Path(sys.executable).with_name("rlinf")
EPOCHS = 12


def _args(save_dir: Path, devices: int = 1) -> list[str]:
    return [
        "fit",
        "--config",
        str(ROOT / "configs/toy/reach_grpo.yaml"),
        f"--trainer.max_epochs={EPOCHS}",
        "--trainer.check_val_every_n_epoch=4",
        f"--trainer.devices={devices}",
        *(["--trainer.strategy=ddp"] if devices > 1 else []),
        "--trainer.logger.class_path=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={save_dir}",
        "--trainer.logger.init_args.name=run",
        "--trainer.logger.init_args.flush_logs_every_n_steps=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--model.init_args.rollout.show_progress=false",
        "--model.init_args.export_policy=false",
        f"--model.init_args.env.init_args.num_envs={8 // devices}",
        "--model.init_args.env.init_args.group_size=4",
        "--model.init_args.env.init_args.max_episode_steps=8",
        "--model.init_args.env.init_args.image_size=16",
        "--model.init_args.rollout.max_steps_per_rollout_epoch=8",
        "--model.init_args.global_batch_size=32",
        "--model.init_args.micro_batch_size=16",
        "--checkpoint.keep_last=2",
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


def _metrics(version_dir: Path) -> dict[tuple[str, int], str]:
    """``{(metric, epoch): value}`` of one run (time/* excluded: wall-clock)."""
    path = version_dir / "metrics.csv"
    out: dict[tuple[str, int], str] = {}
    if not path.exists():
        return out
    for row in csv.DictReader(path.open()):
        for key, value in row.items():
            if value and key not in ("epoch", "step") and not key.startswith("time/") and row.get("epoch"):
                out[(key, int(row["epoch"]))] = value
    return out


def _newest_with_checkpoint(runs: Path) -> Path | None:
    dirs = [
        d
        for d in sorted(runs.glob("run/version_*"), key=lambda d: int(d.name.split("_")[1]))
        if any((d / "checkpoints").glob("epoch=*.ckpt"))
    ]
    return dirs[-1] if dirs else None


def _kill_chain(tmp_path: Path, devices: int, kills: int, seed: int) -> tuple[int, list[Path]]:
    """Run, kill -9 at a random moment after this run's first checkpoint, resume; ``kills`` times, then finish."""
    rng = random.Random(seed)
    runs = tmp_path / "killed"
    done = 0
    for attempt in range(kills + 4):
        last = done == kills or attempt == kills + 3
        saved = [int(p.name.split("-")[0][6:]) for p in runs.glob("run/version_*/checkpoints/epoch=*.ckpt")]
        target = max(saved, default=-1) + 1 + rng.randint(0, 1)  # kill after this epoch's checkpoint ...
        resume = _newest_with_checkpoint(runs)
        cmd = [str(RLINF), *_args(runs, devices), *(["--ckpt_path", str(resume)] if resume else [])]
        proc = subprocess.Popen(
            cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )  # its own process group: the kill takes every rank
        if last:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err.decode()[-2000:]
            break
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if any(runs.glob(f"run/version_*/checkpoints/epoch={target}-*.ckpt")):
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.25))  # ... somewhere in the next rollout / update / checkpoint write
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            done += 1
        proc.wait()
    return done, sorted(runs.glob("run/version_*"))


def _uninterrupted(save_dir: Path, devices: int) -> dict[tuple[str, int], str]:
    """The metrics of the uninterrupted run, every epoch logged."""
    proc = subprocess.run([str(RLINF), *_args(save_dir, devices)], env=_env(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    base = _metrics(save_dir / "run/version_0")
    assert {e for _, e in base} == set(range(EPOCHS))
    return base


@pytest.fixture(scope="module")
def one_rank_baseline(tmp_path_factory) -> dict[tuple[str, int], str]:
    """The one-rank uninterrupted run, shared by the tests that compare one-rank resumes with it (one `rlinf fit`
    start less)."""
    return _uninterrupted(tmp_path_factory.mktemp("base"), devices=1)


def _check_against_baseline(base: dict[tuple[str, int], str], versions: list[Path], kills: int = 1) -> int:
    compared, epochs = 0, set()
    for v in versions:
        for key, value in _metrics(v).items():
            epochs.add(key[1])
            assert base.get(key) == value, f"{v.name}: {key} = {value}, uninterrupted run: {base.get(key)}"
            compared += 1
    # a kill between a step's checkpoint and the logger's flush loses that step's log lines (not its training)
    assert epochs <= set(range(EPOCHS)) and EPOCHS - 1 in epochs and len(set(range(EPOCHS)) - epochs) <= kills
    return compared


def test_kill_minus_9_at_random_moments_resumes_exactly_one_rank(tmp_path, one_rank_baseline):
    kills, versions = _kill_chain(tmp_path, devices=1, kills=3, seed=1)
    assert kills >= 3, "the toy run finished before the kills landed: the test no longer interrupts it"
    assert _check_against_baseline(one_rank_baseline, versions, kills) > 50


@pytest.mark.slow
def test_kill_minus_9_at_random_moments_resumes_exactly_two_ranks(tmp_path):
    kills, versions = _kill_chain(tmp_path, devices=2, kills=2, seed=2)
    assert kills >= 2, "the toy run finished before the kills landed: the test no longer interrupts it"
    assert _check_against_baseline(_uninterrupted(tmp_path / "base", devices=2), versions, kills) > 50


def test_kill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, one_rank_baseline):
    """A real SIGKILL between writing the temporary file and renaming it (the 3rd checkpoint): no partial
    ``*.ckpt`` appears, and resuming from the directory continues from the 2nd and matches the uninterrupted run."""
    runs = tmp_path / "killed"
    code = (
        "import os, signal, sys\n"
        "calls = []\n"
        "real = os.replace\n"
        "def replace(a, b):\n"
        "    if str(b).endswith('.ckpt') and 'epoch=' in str(b):\n"
        "        calls.append(b)\n"
        "        if len(calls) == 3: os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(a, b)\n"
        "os.replace = replace\n"
        "from rlinf_core.cli.main import main\n"
        "main(sys.argv[1:])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *_args(runs)], env=_env(), capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    ckpts = runs / "run/version_0/checkpoints"
    assert sorted(p.name for p in ckpts.glob("*.ckpt")) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    assert [p.name for p in ckpts.glob(".epoch=2*.tmp-*")], "the interrupted write stayed a temporary file"
    proc = subprocess.run(
        [str(RLINF), *_args(runs), "--ckpt_path", str(runs / "run/version_0")],
        env=_env(),
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert "epoch=1-step=8.ckpt" in proc.stderr.decode()
    assert _check_against_baseline(one_rank_baseline, sorted(runs.glob("run/version_*"))) > 50


@pytest.mark.slow
def test_a_rank_killed_under_ddp_stops_the_survivor_with_a_line_naming_it(tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [str(RLINF), *_args(runs, devices=2)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and not any(runs.glob("run/version_*/checkpoints/epoch=*.ckpt")):
        time.sleep(0.05)
    rank1 = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert rank1, "rank 1 runs as a child of the launching process"
    os.kill(int(rank1[0]), signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode not in (0, None) and time.time() - t0 < 60, "the survivor stops, no hang"
    last = [ln for ln in err.decode().splitlines() if ln.startswith("rlinf: error:")]
    assert last and "rank 1 died or was killed" in last[-1], err.decode()[-1500:]
