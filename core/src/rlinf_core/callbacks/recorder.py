"""``RolloutRecorder``: writes the episodes of any env (a real simulator or a world model) during ``rlinf fit`` /
``rlinf validate`` in the released ``traj*.npy`` format, as training data of world models and reward classifiers.

Add it to ``trainer.callbacks``::

    trainer:
      callbacks:
        - class_path: RolloutRecorder
          init_args: {image_size: 256, action_dim: 7, max_files: 2000}

Every finished episode of a recorded sub-env becomes one file ``<out_dir>/{train,eval}/traj_rank<r>_<n>.npy``:
frame dicts ``{"image", "delta_action", "instruction", "success"}`` for frame 0 (the reset observation, zero
action, not a success) and one per env step (the observation after the step, the action of that step, the
env's success flag) — the alignment :mod:`rlinf_core.world_models.datasets` reads. Episodes cut by the end of a
rollout epoch (``auto_reset: false``) are written at the next reset, as they are (truncated). Files are written
atomically (a temporary name, then renamed), so a reader never sees half a file.

The recorder observes the env through :attr:`rlinf_core.Env.step_observers`: it sees the frames of every step of the
first ``min(num_envs, video_cfg.max_envs)`` sub-envs; with ``all_envs`` (default) it raises the env's
``video_cfg.max_envs`` to ``num_envs`` (in-process envs; a video, if one is recorded too, then tiles every
sub-env). Buffered episodes are held in memory at the recorded size (``image_size``) until they end.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.rl_loop import RLLoop
from rlinf_core.lerobot.recording import LeRobotEpisodeSink
from rlinf_core.lerobot.writer import dataset_state
from rlinf_core.world_models.datasets import resize_frames
from rlinf_core.world_models.init_data import save_init_trajectory

__all__ = ["RolloutRecorder"]


@dataclass
class _Buffer:
    instruction: str
    frames: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    success: list[bool] = field(default_factory=list)


class RolloutRecorder(Callback):
    """Records finished episodes of the training and / or eval env in the released ``traj*.npy`` format.

    Args:
        out_dir: root of the files (``<out_dir>/train``, ``<out_dir>/eval``); default ``<log_dir>/rollouts``.
        image_size: resize frames to this square size (``null``: as rendered).
        action_dim: write actions of this size, zeros inserted before the last (gripper) entry (e.g. MetaWorld's
            4-D ``xyz + gripper`` as 7-D for a world model taking LIBERO-style actions); ``null``: the env's.
        train: record the training rollouts.
        eval: record the evaluation episodes (``rlinf fit`` evals and ``rlinf validate``).
        max_files: at most this many files per split and rank; later episodes are dropped (one notice).
        min_steps: episodes with fewer env steps are not written.
        all_envs: record every sub-env (raises ``video_cfg.max_envs`` to ``num_envs`` for in-process envs).
        format: ``"npy"`` (the files above) or ``"lerobot"``: one LeRobot v3.0 dataset per split and rank,
            ``<out_dir>/<split>/lerobot_rank<r>[_<n>]`` (:mod:`rlinf_core.lerobot.recording`), written in pieces of
            ``episodes_per_file`` episodes and finished when the run ends, is interrupted (Ctrl-C, ``SIGTERM``) or
            fails; ``max_files`` then counts episodes (``written`` lists the dataset once per episode). A dataset
            that an earlier run left cut short (killed) is continued, with a notice; a finished one is never
            written to (the next ``_<n>`` is).
        fps: frame rate stored in a LeRobot dataset.
        video: LeRobot cameras as H.264 video (``False``: lossless PNG frames).
        episodes_per_file: LeRobot episodes per data / video file: a process killed outright (``kill -9``) loses at
            most the file being written.
    """

    def __init__(
        self,
        out_dir: str | None = None,
        image_size: int | None = None,
        action_dim: int | None = None,
        train: bool = True,
        eval: bool = True,
        max_files: int = 10000,
        min_steps: int = 1,
        all_envs: bool = True,
        format: str = "npy",
        fps: int = 10,
        video: bool = True,
        episodes_per_file: int = 100,
    ) -> None:
        if format not in ("npy", "lerobot"):
            raise ValueError(f"RolloutRecorder.format must be 'npy' or 'lerobot', got {format!r}")
        if image_size is not None and image_size < 1:
            raise ValueError(f"RolloutRecorder.image_size must be >= 1 (or null: as rendered), got {image_size}")
        if action_dim is not None and action_dim < 1:
            raise ValueError(f"RolloutRecorder.action_dim must be >= 1 (or null: the env's), got {action_dim}")
        if episodes_per_file < 1:
            raise ValueError(f"RolloutRecorder.episodes_per_file must be >= 1, got {episodes_per_file}")
        if max_files < 0 or min_steps < 1:
            raise ValueError(f"RolloutRecorder needs max_files >= 0 and min_steps >= 1, got {max_files}, {min_steps}")
        self.out_dir = out_dir
        self.image_size = image_size
        self.action_dim = action_dim
        self.record_train = train
        self.record_eval = eval
        self.max_files = max_files
        self.min_steps = min_steps
        self.all_envs = all_envs
        self.format, self.fps, self.video, self.episodes_per_file = format, fps, video, episodes_per_file
        self._sinks: dict[str, Any] = {}
        self.root: Path | None = None
        self.rank = 0
        self.written: dict[str, list[Path]] = {"train": [], "eval": []}
        self._buffers: dict[int, list[_Buffer | None]] = {}
        self._observers: dict[int, tuple[BatchedEnv, Any, str]] = {}
        self._next_index: dict[str, int] = {}
        self._full_notice: set[str] = set()
        self._lock = threading.Lock()  # pipeline stages step their envs (and call the observers) in threads

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank calls it
        self.rank = trainer.global_rank
        self.root = Path(self.out_dir) if self.out_dir else Path(log_dir or ".") / "rollouts"

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.record_train:
            for env in pl_module.train_envs if isinstance(pl_module, RLLoop) else []:
                self.attach(env, "train")

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = pl_module.eval_env if isinstance(pl_module, RLLoop) else None
        if self.record_eval and env is not None:
            self.attach(env, "eval")

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = pl_module.eval_env if isinstance(pl_module, RLLoop) else None
        if env is not None:
            self.detach(env)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for env, _, _ in list(self._observers.values()):
            self.detach(env)
        self.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """A run stopped by an error, Ctrl-C or ``SIGTERM`` (Lightning turns both into exceptions and calls this
        before it shuts down): write the episodes still running as they are and finish the LeRobot datasets."""
        try:
            for env, _, _ in list(self._observers.values()):
                self.detach(env)
        finally:
            try:
                self.close()
            except Exception as err:  # noqa: BLE001 - never hide the exception that stopped the run
                print(f"rlinf: warning: RolloutRecorder could not finish its recordings: {err}", file=sys.stderr)

    def close(self) -> list[Path]:
        """Finish the LeRobot datasets (``format="lerobot"``); returns their roots."""
        with self._lock:
            sinks, self._sinks = self._sinks, {}
        return [root for root in (sink.close() for sink in sinks.values()) if root is not None]

    # ------------------------------------------------------------------ observing an env
    def attach(self, env: BatchedEnv, split: str) -> None:
        """Start recording ``env``'s episodes into ``split`` (idempotent)."""
        if id(env) in self._observers:
            return
        if self.root is None:
            self.root = Path(self.out_dir or "rollouts")
        in_process = env.unwrapped is env  # a WorkerEnv's workers were built with the video_cfg they had
        if self.all_envs and in_process and env.video_cfg.max_envs < env.num_envs:
            env.video_cfg.max_envs = env.num_envs

        def observer(env: BatchedEnv, event: str, arg: Any, result: Any, frames: list[dict[str, Any]]) -> None:
            if event == "reset":
                self._on_reset(env, split, result)
            elif event == "chunk_step":
                self._on_chunk(env, split, arg, result, frames)

        self._observers[id(env)] = (env, observer, split)
        self._buffers[id(env)] = []
        env.step_observers = (*env.step_observers, observer)

    def detach(self, env: BatchedEnv) -> None:
        """Stop recording ``env``: episodes still running are written as they are (if long enough)."""
        entry = self._observers.pop(id(env), None)
        if entry is None:
            return
        env, observer, split = entry
        env.step_observers = tuple(o for o in env.step_observers if o is not observer)
        for b in range(len(self._buffers.get(id(env), []))):
            self._finish(env, b, split)
        self._buffers.pop(id(env), None)

    def _on_reset(self, env: BatchedEnv, split: str, obs) -> None:
        images = self._images(obs.main_images)
        bufs = self._buffers[id(env)]
        for b in range(len(bufs)):
            self._finish(env, b, split)
        n = min(len(images), env.video_cfg.max_envs)  # the sub-envs whose step frames are captured
        self._buffers[id(env)] = [self._start(images[b], obs.task_descriptions[b], env) for b in range(n)]

    def _on_chunk(self, env: BatchedEnv, split: str, actions: Any, res, frames: list[dict[str, Any]]) -> None:
        bufs = self._buffers[id(env)]
        if not frames or not bufs:
            return
        acts = actions.detach().cpu().float().numpy() if torch.is_tensor(actions) else np.asarray(actions, np.float32)
        step_images = [self._images(f["images"]) for f in frames]
        valid, success = res.valid.numpy(), res.success.numpy()
        done = (res.terminations | res.truncations).numpy()
        new_obs = None
        V = min(len(bufs), len(step_images[0]))
        for b in range(V):
            for c in range(len(step_images)):
                buf = bufs[b]
                if not valid[b, c] or buf is None:
                    continue
                buf.frames.append(step_images[c][b])
                buf.actions.append(self._action(acts[b, c]))
                buf.success.append(bool(success[b, c]))
                if done[b, c]:
                    self._finish(env, b, split)
                    if env.auto_reset:  # the new episode's first observation is the chunk's returned obs
                        new_obs = self._images(res.obs.main_images) if new_obs is None else new_obs
                        bufs[b] = self._start(new_obs[b], res.obs.task_descriptions[b], env)

    # ------------------------------------------------------------------ buffers and files
    def _images(self, images: Any) -> np.ndarray:
        arr = images.detach().cpu().numpy() if torch.is_tensor(images) else np.asarray(images)
        if arr.dtype != np.uint8:
            arr = np.clip(np.round(arr), 0, 255).astype(np.uint8)
        if self.image_size is not None and arr.shape[1:3] != (self.image_size, self.image_size):
            arr = resize_frames(arr, self.image_size)
        return arr

    def _action(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, np.float32).reshape(-1)
        D = self.action_dim
        if D is None or D == len(a):
            return a
        if D < len(a):
            raise ValueError(f"RolloutRecorder.action_dim {D} is smaller than the env's {len(a)}-D actions")
        return np.concatenate([a[:-1], np.zeros(D - len(a), np.float32), a[-1:]])

    def _start(self, image: np.ndarray, instruction: str, env: BatchedEnv) -> _Buffer:
        buf = _Buffer(instruction=str(instruction))
        buf.frames.append(image)
        buf.actions.append(np.zeros(self.action_dim or env.action_dim, np.float32))
        buf.success.append(False)
        return buf

    def _finish(self, env: BatchedEnv, b: int, split: str) -> None:
        bufs = self._buffers.get(id(env))
        if not bufs or b >= len(bufs) or bufs[b] is None:
            return
        buf, bufs[b] = bufs[b], None
        if len(buf.frames) - 1 < self.min_steps:
            return
        path = self._claim_path(split)
        if path is not None:
            frames, actions, success = np.stack(buf.frames), np.stack(buf.actions), np.array(buf.success)
            if self.format == "lerobot":
                with self._lock:
                    sink = self._lerobot_sink(split)
                    sink.add(frames, actions, success, buf.instruction)
                    if sink.resume and sink.count == 1:
                        print(
                            f"rlinf: RolloutRecorder: {sink.root} was cut short by an earlier run (killed before it "
                            f"was finished); appending after its {sink.resumed_from} finished episodes (the "
                            "piece being written when it stopped is lost)",
                            file=sys.stderr,
                        )
                    self.written[split][self.written[split].index(path)] = sink.root  # one entry per episode
            else:
                save_init_trajectory(path, frames, buf.instruction, actions, success)

    def _lerobot_sink(self, split: str):
        if split not in self._sinks:
            base, n = self.root / split / f"lerobot_rank{self.rank}", 0
            while True:  # never write into an earlier run's finished dataset, nor one another process writes
                root = base.with_name(f"{base.name}_{n}") if n else base
                state = dataset_state(root)
                if state == "cut" or not root.exists():
                    break
                n += 1
            sink = LeRobotEpisodeSink(root, self.fps, self.video, self.episodes_per_file, resume=state == "cut")
            self._sinks[split] = sink
        return self._sinks[split]

    def _claim_path(self, split: str) -> Path | None:
        """The next file of ``split`` (``None`` past ``max_files``), reserved under the lock."""
        with self._lock:
            written = self.written[split]
            if len(written) >= self.max_files:
                if split not in self._full_notice:
                    self._full_notice.add(split)
                    print(
                        f"rlinf: RolloutRecorder reached max_files={self.max_files} for {split}; later episodes "
                        "are not written",
                        file=sys.stderr,
                    )
                return None
            if split not in self._next_index:  # never overwrite the files of an earlier run in the same out_dir
                old = [p.stem.rsplit("_", 1)[1] for p in (self.root / split).glob(f"traj_rank{self.rank}_*.npy")]
                self._next_index[split] = max((int(n) for n in old if n.isdigit()), default=-1) + 1
            path = self.root / split / f"traj_rank{self.rank}_{self._next_index[split]:06d}.npy"
            self._next_index[split] += 1
            written.append(path)
            return path
