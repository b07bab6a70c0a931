"""rlinf :class:`~rlinf_core.contracts.observation.Observation` ⇄ π0 / π0.5 model tensors (openpi's transforms).

The model's camera slots (3) are built as openpi and RLinf do: the ``num_images_in_input`` fed cameras, then
black masked slots. Valid tokens never attend to a masked slot, so the velocities (and the expert critic) are the
same without them; but padded language positions (fully masked attention rows) attend uniformly over every key,
masked cameras included, and RLinf's π0.5 critic after the VLM averages those positions. ``num_slots`` lets the
policy drop the masked slots when nothing reads the prefix output (up to 3× less prefix compute).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from rlinf_core.contracts import Observation
from rlinf_policy_openpi.checkpoint import NormStats
from rlinf_policy_openpi.config import OpenPIConfig
from rlinf_policy_openpi.transforms import (
    ImageResize,
    PromptTokenizer,
    camera_slots,
    normalize,
    pad_to_dim,
    unnormalize,
)


@dataclass
class ModelBatch:
    """Model inputs of B observations.

    Attributes:
        images: per camera slot (all the model's, fed or masked) ``[B, 3, S, S]`` in [-1, 1].
        image_masks: per slot bool ``[B]``.
        tokens: ``[B, max_token_len]`` prompt ids; token_masks: bool ``[B, max_token_len]``.
        state: ``[B, 32]`` normalised, zero-padded state (zeros without ``Observation.states``).
    """

    images: list[torch.Tensor]
    image_masks: list[torch.Tensor]
    tokens: torch.Tensor
    token_masks: torch.Tensor
    state: torch.Tensor


class ObservationInputs:
    """Observation → :class:`ModelBatch`, and normalised model actions → env-scale actions.

    Args:
        config: the model's architecture (π0 / π0.5 decides z-score vs quantile normalisation).
        norm_stats: ``{"state": NormStats, "actions": NormStats}`` of the checkpoint.
        tokenizer_path: the local ``paligemma_tokenizer.model`` (None only for meta-device builds).
        image_resize: ``pil`` (openpi / RLinf checkpoints) or ``lerobot`` (see
            :func:`~rlinf_policy_openpi.transforms.default_image_resize`).
    """

    def __init__(
        self,
        config: OpenPIConfig,
        norm_stats: dict[str, NormStats],
        tokenizer_path: str | Path | None,
        image_resize: ImageResize = "pil",
    ) -> None:
        self.config = config
        self.image_resize = image_resize
        self.stats = norm_stats
        self.quantile = bool(config.pi05)  # openpi: quantile normalisation for every model but π0
        # None: a meta-device build (architecture only), which never tokenises
        self.tokenizer = None if tokenizer_path is None else PromptTokenizer(tokenizer_path, config.max_token_len)

    @property
    def action_dim(self) -> int:
        """Action dimensions of the norm stats (the env-facing action size)."""
        return int(self.stats["actions"].mean.shape[-1])

    def _state(self, obs: Observation, device: torch.device) -> torch.Tensor | None:
        if obs.states is None:
            return None
        dim = self.stats["state"].mean.shape[-1]
        if obs.states.shape[-1] > dim:
            raise ValueError(
                f"Observation.states has {obs.states.shape[-1]} dimensions but the checkpoint's state norm stats "
                f"have {dim}; use the env's state_type the model was trained with"
            )
        return normalize(obs.states.to(device).float(), self.stats["state"], self.quantile)

    def __call__(
        self, obs: Observation, num_images: int, device: torch.device, num_slots: int | None = None
    ) -> ModelBatch:
        """``num_images`` fed cameras (main, then wrist views) in the first slots, then black masked slots up to
        ``num_slots`` (default: all the model's, as openpi)."""
        views: list[torch.Tensor | None] = [obs.main_images]
        if num_images > 1:
            wrist = obs.wrist_images
            if wrist is None:
                raise ValueError(f"num_images_in_input={num_images} needs wrist_images; the env gives none")
            wrist = wrist.unsqueeze(1) if wrist.dim() == 4 else wrist
            if wrist.shape[1] < num_images - 1:
                raise ValueError(
                    f"num_images_in_input={num_images} needs {num_images - 1} wrist views, got {wrist.shape[1]}"
                )
            views += [wrist[:, i] for i in range(num_images - 1)]
        images, masks = camera_slots(
            [v.to(device) for v in views],
            num_slots or self.config.num_images,
            self.config.vision.image_size,
            resize=self.image_resize,
        )
        state = self._state(obs, device)
        discrete = self.config.pi05 and self.config.discrete_state_input
        if discrete and state is None:
            raise ValueError(
                "this π0.5 checkpoint writes the state into the prompt (discrete_state_input); the env gives no states"
            )
        tokens, token_masks = self.tokenizer(list(obs.task_descriptions), state.cpu() if discrete else None)
        padded = (
            pad_to_dim(state, self.config.action_dim)
            if state is not None
            else torch.zeros(len(obs), self.config.action_dim, device=device)
        )
        return ModelBatch(images, masks, tokens.to(device), token_masks.to(device), padded)

    def unnormalize_actions(self, actions: torch.Tensor, action_dim: int) -> torch.Tensor:
        """``[..., 32]`` normalised model actions → ``[..., action_dim]`` env-scale actions."""
        return unnormalize(actions[..., :action_dim].float(), self.stats["actions"], self.quantile)


__all__ = ["ModelBatch", "ObservationInputs"]
