"""World-model simulator contract: a frozen generative model that predicts frames from actions.

Shapes: B = batch, C = frames per action chunk, H×W images.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from rlinf_core.memory.meta_peak import world_model_memory


@dataclass(frozen=True)
class ConditionSpec:
    """How a world model wants the condition frames and actions of a new episode.

    Args:
        num_frames: condition frames ``T``.
        frames: ``repeat_first``: frame 0 repeated ``T`` times (OpenSora fills its condition queue this
            way); ``first_and_last``: frame 0 then the file's last ``T - 1`` frames when it has at least
            ``T - 1`` frames (keyframe init, Wan; with exactly ``T - 1`` frames these include frame 0, as
            upstream), else frame 0 repeated.
        pad_gripper: condition actions of frames that are copies of frame 0 are zeros with the last
            (gripper) entry set to this value (Wan: -1, open); ``None``: all zeros. Frames taken from the
            file keep their ``delta_action``.
    """

    num_frames: int = 1
    frames: Literal["repeat_first", "first_and_last"] = "repeat_first"
    pad_gripper: float | None = None

    def __post_init__(self) -> None:
        if self.num_frames < 1:
            raise ValueError(f"ConditionSpec.num_frames must be >= 1, got {self.num_frames}")
        if self.frames not in ("repeat_first", "first_and_last"):
            raise ValueError(f"ConditionSpec.frames must be 'repeat_first' or 'first_and_last', got {self.frames!r}")


class WorldModel(nn.Module):
    """Action-conditioned video model used as a simulator (frozen during RL).

    A world model keeps a per-env state (its frame/latent queue). :class:`rlinf_core.WorldModelEnv`
    drives it: :meth:`init_state` from the condition frames its :attr:`condition` asks for, then
    :meth:`predict` once per chunk. The env moves it to the training device; its state, the
    frames it takes and the frames it returns live on that device.
    """

    #: the condition frames and actions an episode starts from (OpenSora: ``ConditionSpec(4)``, frame 0
    #: repeated; Wan: ``ConditionSpec(5, "first_and_last", pad_gripper=-1.0)``, keyframe init).
    condition: ConditionSpec = ConditionSpec()
    #: D, the size of the actions it takes (required: a class attribute, or set in ``__init__`` from the checkpoint)
    action_dim: int
    #: ``(condition, target)`` frames of a training clip (OpenSora ``(4, 8)``, Wan ``(5, 8)``); see
    #: :class:`rlinf_core.world_models.datasets.ClipDataset` for how windows are cut and aligned with actions.
    clip_frames: tuple[int, int] = (1, 1)
    #: side of the square frames the model works at (``None``: any size); ``rlinf wm-score`` resizes episodes to it,
    #: ``rlinf memory`` sizes the frames with it (256 when ``None``)
    image_size: int | None = None
    #: the checkpoint directory the weights were read from (``None``: built from scratch)
    model_path: str | None = None

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any) -> WorldModel:
        """Load what :meth:`save_pretrained` wrote to ``path``; ``overrides`` are constructor settings, which win
        over the ones saved with it (:class:`rlinf_core.models.settings.SavedSettings` implements both)."""
        raise NotImplementedError(f"{cls.__name__} does not implement WorldModel.from_pretrained(path, **overrides)")

    @property
    def num_condition_frames(self) -> int:
        return self.condition.num_frames

    def init_state(self, frames: torch.Tensor, actions: torch.Tensor) -> Any:
        """State for B envs from condition frames ``uint8 [B, T, H, W, 3]`` and actions ``float [B, T, D]``
        (``T = condition.num_frames``, built as :attr:`condition` says; on the model's device)."""
        raise NotImplementedError

    def predict(
        self, state: Any, actions: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, Any]:
        """Predict ``uint8 [B, C, H, W, 3]`` frames for actions ``[B, C, D]``; return (frames, new state)."""
        raise NotImplementedError

    def predict_with_reward_frames(
        self, state: Any, actions: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """:meth:`predict`, plus the frames the reward model scores: ``(frames, reward_frames, new state)``.

        The default scores the uint8 observations. A model whose upstream env scores its float frames
        (RLinf's OpenSora env) overrides this and returns them as ``float32 [B, C, H, W, 3]`` in ``[0, 255]``
        (unrounded, unclamped: reward models clamp)."""
        frames, state = self.predict(state, actions, generator=generator)
        return frames, frames, state

    def select(self, state: Any, env_ids: torch.Tensor) -> Any:
        """Rows ``env_ids`` of ``state``."""
        raise NotImplementedError

    def assign(self, state: Any, env_ids: torch.Tensor, new: Any) -> Any:
        """``state`` with rows ``env_ids`` replaced by ``new``."""
        raise NotImplementedError

    # -- fine-tuning (optional; :class:`rlinf_core.supervised.world_model_trainers.WorldModelTrainer` needs both) --
    def training_loss(
        self, frames: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Scalar training loss of a batch of clips (the model's own objective, e.g. rectified flow).

        Args:
            frames: ``uint8 [B, Nc + Nt, H, W, 3]``: ``Nc, Nt = clip_frames`` condition then target frames.
            actions: ``float32 [B, Nc + Nt, D]`` env-scale actions, entry ``k`` the action that produced frame
                ``k`` (pad action for padded / initial frames; ``ClipDataset``'s alignment).
            generator: RNG of the noise and timesteps (``None``: the global RNG); a fixed one makes the loss
                deterministic (validation).
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement training_loss, so it cannot be fine-tuned by WorldModelTrainer"
        )

    def save_pretrained(self, path: str) -> None:
        """Write the model to directory ``path`` in the layout its loader reads unchanged (the released one)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement save_pretrained")

    # -- memory (``rlinf memory``; :mod:`rlinf_core.memory.meta_peak`) ------------------------------------------------
    def runtime_dtype(self, device_type: str) -> torch.dtype | None:
        """The dtype the weights run in on a ``device_type`` device (``None``: as built). Override when a
        precision setting such as ``auto`` resolves by device (bf16 on ``cuda``)."""
        return None

    def memory_profile(self, batch: int, chunk: int, device_type: str = "cuda") -> Any:
        """Per-GPU memory of this (meta-built) model stepping ``batch`` envs by ``chunk`` frames on ``device_type``.

        The default: weights of each child module cast to :meth:`runtime_dtype`, and the peaks of the real
        :meth:`init_state` (condition frames at ``image_size``, zero actions) and :meth:`predict` run on the meta
        device. Override it when a forward cannot run on meta, or to add terms; return a
        :class:`rlinf_core.memory.meta_peak.WorldModelMemory`.
        """

        return world_model_memory(self, batch, chunk, device_type, image_size=self.image_size or 256)


class RewardModel(nn.Module):
    """Scores frames: probability of task success per frame."""

    def success_prob(self, frames: torch.Tensor, instructions: list[str] | None = None) -> torch.Tensor:
        """``float [N]`` success probabilities for frames ``uint8 [N, H, W, 3]``; ``instructions`` (one per
        frame) lets a task-conditioned model (Wan's ``TaskEmbedResnetRewModel``) pick the task."""
        raise NotImplementedError

    # -- training (optional; :class:`rlinf_core.supervised.world_model_trainers.RewardModelTrainer` needs both) ---
    def success_logits(self, frames: torch.Tensor, instructions: list[str] | None = None) -> torch.Tensor:
        """``float [N]`` logits whose sigmoid is :meth:`success_prob` (trained with BCE)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement success_logits, so it cannot be trained by RewardModelTrainer"
        )

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any) -> RewardModel:
        """Load what :meth:`save_pretrained` wrote (the file it returned, or the directory it was given);
        ``overrides`` are constructor settings, which win over the ones saved with it."""
        raise NotImplementedError(f"{cls.__name__} does not implement RewardModel.from_pretrained(path, **overrides)")

    def save_pretrained(self, path: str) -> Any:
        """Write the model's checkpoint into directory ``path`` (the file its loader reads); returns the file."""
        raise NotImplementedError(f"{type(self).__name__} does not implement save_pretrained")
