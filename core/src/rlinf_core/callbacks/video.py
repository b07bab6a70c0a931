"""Rollout and eval videos: tiled mp4 files with an info overlay, and the same clip in the logger."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.callbacks import Callback
from PIL import Image, ImageDraw

from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.rl_loop import RLLoop

MIN_TILE = 128


def tile_frames(frames: list[dict[str, Any]], info_on_video: bool = True) -> np.ndarray:
    """``uint8 [T, H', W', 3]`` video: the V sub-envs of every frame tiled into a grid.

    Each frame dict holds ``images [V, H, W, 3]``, ``rewards [V]``, ``success [V]``; tiles are
    upscaled to at least 128 px so the overlay (step, cumulative reward, success) is readable.
    """
    V, H, W, _ = frames[0]["images"].shape
    scale = max(1, math.ceil(MIN_TILE / max(H, W)))
    cols = math.ceil(math.sqrt(V))
    rows = math.ceil(V / cols)
    th, tw = H * scale, W * scale
    returns = np.zeros(V)
    done = np.zeros(V, bool)
    video = np.zeros((len(frames), rows * th, cols * tw, 3), np.uint8)
    for t, frame in enumerate(frames):
        returns += frame["rewards"][:V]
        done |= frame["success"][:V].astype(bool)
        for v in range(V):
            tile = frame["images"][v]
            if scale > 1:
                tile = tile.repeat(scale, 0).repeat(scale, 1)
            if info_on_video:
                img = Image.fromarray(np.ascontiguousarray(tile))
                draw = ImageDraw.Draw(img)
                text = f"t={t} R={returns[v]:.2f}" + (" success" if done[v] else "")
                draw.rectangle([0, 0, tw, 12], fill=(0, 0, 0))
                draw.text((2, 1), text, fill=(0, 255, 0) if done[v] else (255, 255, 255))
                tile = np.asarray(img)
            r, c = divmod(v, cols)
            video[t, r * th : (r + 1) * th, c * tw : (c + 1) * tw] = tile
    return video


def write_mp4(video: np.ndarray, path: Path, fps: int) -> Path:
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = video.shape[1:3]
    pad_h, pad_w = (-h) % 16, (-w) % 16  # codec-friendly size
    if pad_h or pad_w:
        video = np.pad(video, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
    with imageio.get_writer(str(path), fps=fps, codec="libx264", quality=7, macro_block_size=16) as writer:
        for frame in video:
            writer.append_data(frame)
    return path


def log_video(logger: Any, tag: str, video: np.ndarray, step: int, fps: int) -> bool:
    """Send the clip to TensorBoard (or wandb); returns False if the logger cannot show videos."""
    try:
        from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
    except ImportError:  # pragma: no cover
        return False
    if isinstance(logger, TensorBoardLogger):
        return _tensorboard_gif(logger.experiment, tag, video, step, fps)
    if isinstance(logger, WandbLogger):
        logger.log_video(tag, [video.transpose(0, 3, 1, 2)], step=step, fps=[fps])
        return True
    return False


def _tensorboard_gif(writer: Any, tag: str, video: np.ndarray, step: int, fps: int) -> bool:
    """The record ``SummaryWriter.add_video`` produces (an animated GIF image summary), without moviepy.

    The one use of a private API: ``add_video`` needs moviepy (dropped) and SummaryWriter has no public way to add
    a ready Summary proto, so the summary goes through ``_get_file_writer()``;
    ``tests/core/test_video_tensorboard.py`` reads it back with TensorBoard and fails if torch changes that.
    """

    from tensorboard.compat.proto.summary_pb2 import Summary

    frames = [Image.fromarray(f) for f in video]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    h, w = video.shape[1:3]
    image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=buf.getvalue())
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
    return True


class RolloutVideoRecorder(Callback):
    """Records videos of the envs whose ``video_cfg.save_video`` is on.

    Training: one rollout every ``video_cfg.every_n_epochs`` epochs (pipeline stage 0); eval:
    every evaluation. Files go to ``video_cfg.video_base_dir`` (default ``<log_dir>/video``) as
    ``{train,eval}/epoch_<n>_rank<r>.mp4``, and the clip is logged as ``video/{train,eval}``.

    Args:
        log_to_logger: also send the clip to the Lightning logger (TensorBoard/wandb).
    """

    def __init__(self, log_to_logger: bool = True) -> None:
        self.log_to_logger = log_to_logger
        self.written: list[Path] = []

    @staticmethod
    def _train_env(module: pl.LightningModule) -> BatchedEnv | None:
        envs = module.train_envs if isinstance(module, RLLoop) else []
        return envs[0] if envs else None

    @staticmethod
    def _eval_env(module: pl.LightningModule) -> BatchedEnv | None:
        return module.eval_env if isinstance(module, RLLoop) else None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = self._train_env(pl_module)
        if env is not None and env.video_cfg.save_video:
            every = max(1, env.video_cfg.every_n_epochs)
            env.capture_frames = trainer.current_epoch % every == 0
            env.pop_frames()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = self._train_env(pl_module)
        if env is not None and env.capture_frames:
            env.capture_frames = False
            self._write(trainer, env, "train")

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = self._eval_env(pl_module)
        if env is not None and env.video_cfg.save_video:
            env.capture_frames = True
            env.pop_frames()

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = self._eval_env(pl_module)
        if env is not None and env.capture_frames:
            env.capture_frames = False
            self._write(trainer, env, "eval")

    def _write(self, trainer: pl.Trainer, env: BatchedEnv, split: str) -> None:
        frames = env.pop_frames()
        if not frames:
            return
        cfg = env.video_cfg
        video = tile_frames(frames, cfg.info_on_video)
        base = Path(cfg.video_base_dir) if cfg.video_base_dir else Path(trainer.log_dir or ".") / "video"
        path = base / split / f"epoch_{trainer.current_epoch}_rank{trainer.global_rank}.mp4"
        self.written.append(write_mp4(video, path, cfg.fps))
        if self.log_to_logger and trainer.global_rank == 0:
            for logger in trainer.loggers:
                log_video(logger, f"video/{split}", video, trainer.global_step, cfg.fps)
