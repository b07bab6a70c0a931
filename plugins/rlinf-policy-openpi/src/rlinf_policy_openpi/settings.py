"""The config groups of :class:`~rlinf_policy_openpi.policy.OpenPIPolicy` (YAML sections ``noise:``, ``critic:``,
``inputs:``), and the map from RLinf's flat key names to them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from rlinf_policy_openpi.flow import NOISE_METHODS, NoiseMethod
from rlinf_policy_openpi.transforms import ImageResize, check_image_resize

ValueVLMMode = Literal["mean_token", "last_token", "first_token"]
VALUE_VLM_MODES = ("mean_token", "last_token", "first_token")


@dataclass(frozen=True)
class NoiseConfig:
    """The stochastic denoise step of the RL rollout (YAML group ``noise:``).

    Args:
        method: the kernel: ``flow_sde`` (SDE with the ODE's marginals), ``flow_noise`` (ODE mean, std from a learned
            explore-noise head), ``flow_cps`` (coefficient-preserving), ``flow_ode`` (no noise: log-probs 0, for
            evaluation only).
        level: flow_sde / flow_cps noise level.
        anneal: move the level linearly per RL step as ``anneal_params`` say.
        anneal_params: ``[start, end, anneal_steps]`` of ``anneal`` (RLinf's ``noise_params``).
        logvar_range: ``[min_std, max_std]`` of the flow_noise head.
        joint_logprob: every denoise step stochastic; the log-prob is the mean over ``log N(x_1; 0, I)`` and the
            N transitions (designed for flow_noise).
        ignore_last: never inject noise at the last denoise step.
    """

    method: NoiseMethod = "flow_sde"
    level: float = 0.5
    anneal: bool = False
    anneal_params: tuple[float, float, int] = (0.7, 0.3, 400)
    logvar_range: tuple[float, float] = (0.08, 0.16)
    joint_logprob: bool = False
    ignore_last: bool = False

    def __post_init__(self) -> None:
        if self.method not in NOISE_METHODS:
            raise ValueError(f"noise_method {self.method!r} not supported; use one of {', '.join(NOISE_METHODS)}")
        if len(self.anneal_params) != 3:
            raise ValueError(f"noise.anneal_params must be [start, end, anneal_steps], got {list(self.anneal_params)}")
        start, end, steps = self.anneal_params
        object.__setattr__(self, "anneal_params", (float(start), float(end), int(steps)))
        object.__setattr__(self, "logvar_range", tuple(float(v) for v in self.logvar_range))


@dataclass(frozen=True)
class CriticConfig:
    """Where the value head reads and what it is (YAML group ``critic:``; whether there is one is the policy's
    ``add_value_head``, the key every policy shares).

    Args:
        after_vlm: read the VLM's prefix output (RLinf's π0.5 MetaWorld setting, ``value_after_vlm``) instead of
            the action expert's.
        vlm_mode: with ``after_vlm``: ``mean_token`` (the fed camera slots' tokens and all ``max_token_len``
            language positions, padding included), ``last_token`` or ``first_token`` (RLinf's ``value_vlm_mode``).
        detach_input: the critic reads detached features (no critic gradient into the expert / VLM).
        chunk_input: the expert critic averages the first C action tokens instead of all H.
        hidden_sizes: MLP widths (default: the checkpoint's ``value_head.*``, else (512, 256, 128)).
    """

    after_vlm: bool = False
    vlm_mode: ValueVLMMode = "mean_token"
    detach_input: bool = False
    chunk_input: bool = False
    hidden_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.vlm_mode not in VALUE_VLM_MODES:
            raise ValueError(f"value_vlm_mode {self.vlm_mode!r} not supported; use {', '.join(VALUE_VLM_MODES)}")
        if self.hidden_sizes is not None:
            object.__setattr__(self, "hidden_sizes", tuple(int(w) for w in self.hidden_sizes))


@dataclass(frozen=True)
class InputConfig:
    """What the model is fed (YAML group ``inputs:``).

    Args:
        num_images_in_input: cameras fed: the main image, then ``wrist_images`` (openpi slots base, left wrist,
            right wrist); the model's other slots are fed black and masked, as openpi / RLinf do.
        asset_id: norm stats directory name (may contain a slash, e.g. ``lerobot/metaworld_mt50``; default: the
            only one in the checkpoint).
        discrete_state_input: π0.5 only: write the state into the prompt as 256-bin tokens (default: the
            checkpoint's config; RLinf's π0.5 MetaWorld / LIBERO fine-tunes use False).
        tokenizer_path: the PaliGemma ``paligemma_tokenizer.model`` (default: in ``model_path``, else openpi's cache
            ``~/.cache/openpi/big_vision/``; never downloaded).
        image_resize: how frames are resized to 224 with padding: ``pil`` (openpi's and RLinf's
            ``openpi_client.image_tools.resize_with_pad``, bit-exact) or ``lerobot`` (lerobot's float
            ``F.interpolate``); default: what the checkpoint's layout was trained with (lerobot → ``lerobot``).
    """

    num_images_in_input: int = 1
    asset_id: str | None = None
    discrete_state_input: bool | None = None
    tokenizer_path: str | None = None
    image_resize: ImageResize | None = None

    def __post_init__(self) -> None:
        if self.image_resize is not None:
            check_image_resize(self.image_resize)


# RLinf's flat key → (group, field): accepted by from_pretrained and rlinf serve's overrides, named in the hint when a
# config uses one, and listed in docs/openpi.md for readers of RLinf's YAMLs.
FLAT_KEYS: dict[str, tuple[str, str]] = {
    "noise_method": ("noise", "method"),
    "noise_level": ("noise", "level"),
    "noise_anneal": ("noise", "anneal"),
    "noise_params": ("noise", "anneal_params"),
    "noise_logvar_range": ("noise", "logvar_range"),
    "joint_logprob": ("noise", "joint_logprob"),
    "ignore_last": ("noise", "ignore_last"),
    "value_after_vlm": ("critic", "after_vlm"),
    "value_vlm_mode": ("critic", "vlm_mode"),
    "detach_critic_input": ("critic", "detach_input"),
    "chunk_critic_input": ("critic", "chunk_input"),
    "value_hidden_sizes": ("critic", "hidden_sizes"),
    **{f.name: ("inputs", f.name) for f in fields(InputConfig)},
}
GROUPS = {"noise": NoiseConfig, "critic": CriticConfig, "inputs": InputConfig}


__all__ = [
    "CriticConfig",
    "FLAT_KEYS",
    "InputConfig",
    "NoiseConfig",
    "VALUE_VLM_MODES",
    "ValueVLMMode",
]
