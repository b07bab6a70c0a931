"""A LeRobot recording survives the run that makes it: an exception, Ctrl-C and SIGTERM finish the dataset (the
recorder's ``on_exception``, under Lightning's own signal handling), and the next run continues a dataset that a
killed run left cut short instead of silently starting ``lerobot_rank0_1``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.callbacks.recorder import RolloutRecorder
from rlinf_core.lerobot.reader import LeRobotReader
from rlinf_core.lerobot.writer import LeRobotWriter, dataset_state
from rlinf_core.rl.algorithms.grpo import GRPO
from rlinf_core.rl.config import RolloutConfig
from rlinf_core.rl.module import RLModule

ROOT = Path(__file__).resolve().parents[2]


class _FailAtStep(pl.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch + 1 == self.step:
            raise RuntimeError("a bug in the middle of training")


def test_an_exception_finishes_the_lerobot_dataset(tmp_path):
    env = ReachEnv(num_envs=4, group_size=2, max_episode_steps=4, image_size=16)
    module = RLModule(env=env, policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=False),
                      algorithm=GRPO(), global_batch_size=8, micro_batch_size=8,
                      rollout=RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False))  # fmt: skip
    recorder = RolloutRecorder(out_dir=str(tmp_path / "rec"), format="lerobot", video=False, eval=False)
    trainer = pl.Trainer(max_epochs=5, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[recorder, _FailAtStep(2)], default_root_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(RuntimeError, match="a bug in the middle"):
        trainer.fit(module)
    root = tmp_path / "rec" / "train" / "lerobot_rank0"
    assert dataset_state(root) == "finished"  # not cut: the writer was closed
    reader = LeRobotReader(root)
    assert reader.num_episodes == len(recorder.written["train"]) == 8  # 2 RL steps x 4 envs, each one episode


def _recording_fit(out: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlinf_core.cli.main", "fit", "--config", str(ROOT / "configs/toy/reach_grpo.yaml"),
           "--trainer.callbacks+=RolloutRecorder", f"--trainer.callbacks.init_args.out_dir={out}",
           "--trainer.callbacks.init_args.format=lerobot", "--trainer.callbacks.init_args.episodes_per_file=16",
           "--trainer.callbacks.init_args.image_size=16", "--model.init_args.env.init_args.num_envs=16",
           "--model.init_args.env.init_args.max_episode_steps=4",
           "--model.init_args.rollout.max_steps_per_rollout_epoch=4",
           "--model.init_args.global_batch_size=32", "--model.init_args.micro_batch_size=32",
           "--trainer.max_epochs=1000", "--trainer.check_val_every_n_epoch=1000",
           f"--trainer.logger.init_args.save_dir={log}"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=log.parent,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip


def _wait_for_step(proc: subprocess.Popen, step: int, timeout: float = 300) -> str:
    seen, t0 = [], time.monotonic()
    for line in proc.stdout:
        seen.append(line)
        if f"step {step}/" in line or time.monotonic() - t0 > timeout:
            return "".join(seen)
    raise AssertionError("".join(seen)[-3000:])


@pytest.mark.slow
def test_ctrl_c_and_sigterm_finish_the_dataset_and_kill_9_keeps_its_finished_pieces(tmp_path):
    signals = {"int": signal.SIGINT, "term": signal.SIGTERM, "kill": signal.SIGKILL}
    runs = {name: (tmp_path / name / "rec", tmp_path / name / "runs") for name in signals}
    for out, log in runs.values():
        log.mkdir(parents=True)
    procs = {name: _recording_fit(out, log) for name, (out, log) in runs.items()}  # all at once: a third the time
    try:
        for name, sig in signals.items():
            _wait_for_step(procs[name], 3)  # steps 1-2 done: 32 episodes recorded, two files of 16 finished
            procs[name].send_signal(sig)
        tails = {name: p.communicate(timeout=300)[0][-3000:] for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
    assert procs["int"].returncode == 1 and "Received SIGTERM" in tails["term"], tails
    assert procs["kill"].returncode == -signal.SIGKILL, tails["kill"]
    for name, (out, _) in runs.items():
        root = out / "train" / "lerobot_rank0"
        # Ctrl-C and SIGTERM finish the dataset; kill -9 leaves it cut, with every finished piece of 16 episodes
        assert dataset_state(root) == ("cut" if name == "kill" else "finished"), (name, tails[name])
        reader = LeRobotReader(root)
        assert reader.num_episodes >= 32, (name, reader.num_episodes)
        if name == "kill":
            assert reader.num_episodes % 16 == 0, reader.num_episodes
        assert all(reader.frames(e, "observation.images.image").shape[1:] == (16, 16, 3) for e in (0, 31))


def test_the_next_run_continues_a_dataset_a_killed_run_left(tmp_path, capsys):
    root = tmp_path / "train" / "lerobot_rank0"
    killed = LeRobotWriter(root, fps=10, action_dim=2, image_shape=(8, 8), video=False, episodes_per_file=2)
    for e in range(3):  # one file of two episodes finished, the third episode in the unfinished one
        killed.add(np.full((3, 8, 8, 3), e, np.uint8), np.zeros((3, 2)), "old")
    os.close(killed._lock)  # the process is gone: its lock with it, its work directory left behind
    assert dataset_state(root) == "cut"
    env = ReachEnv(num_envs=2, max_episode_steps=2, image_size=8)
    rec = RolloutRecorder(out_dir=str(tmp_path), format="lerobot", video=False)
    rec.attach(env, "train")
    obs = env.reset()
    env.chunk_step(torch.zeros(2, 2, 2))
    rec.detach(env)
    assert rec.close() == [root] and not (tmp_path / "train" / "lerobot_rank0_1").exists()
    err = capsys.readouterr().err
    assert f"rlinf: RolloutRecorder: {root} was cut short by an earlier run (killed before it was finished); " \
        "appending after its 2 finished episodes" in err  # fmt: skip
    reader = LeRobotReader(root)
    assert [reader.task(e) for e in range(4)] == ["old", "old", *obs.task_descriptions]
    assert reader.num_episodes == 4 and [e["episode_index"] for e in reader.episodes] == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.concatenate([reader.column(e, "index") for e in range(4)]), np.arange(12))


def test_a_finished_dataset_is_never_written_to_again(tmp_path):
    for _ in range(2):
        env = ReachEnv(num_envs=2, max_episode_steps=2, image_size=8)
        rec = RolloutRecorder(out_dir=str(tmp_path), format="lerobot", video=False)
        rec.attach(env, "train")
        env.reset()
        env.chunk_step(torch.zeros(2, 2, 2))
        rec.detach(env)
        rec.close()
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == ["lerobot_rank0", "lerobot_rank0_1"]
