"""The config groups of the OpenVLA policies (YAML sections ``actions:`` and ``inputs:``; ``inputs:`` as on
:class:`~rlinf_policy_openpi.policy.OpenPIPolicy`), and the map from RLinf's flat key names to them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from rlinf_core.models.norm_stats import NormalizationType
from rlinf_policy_openvla.processing import IMAGE_RESIZES, ImageResize

NORMALIZATION_TYPES = ("bounds_q99", "bounds")


@dataclass(frozen=True)
class ActionConfig:
    """What one action is and how tokens map to it (YAML group ``actions:``).

    Args:
        unnorm_key: dataset key of ``norm_stats`` for un-normalising actions (``{key}_no_noops`` also tried), e.g.
            ``libero_spatial_no_noops``; may be omitted when the checkpoint has a single key.
        action_dim: optional check against the norm stats (the action dimension comes from them).
        num_action_chunks: actions per decoded chunk ``C`` (``C × action_dim`` tokens; OpenVLA-OFT's default: 8).
        normalization_type: ``bounds_q99`` (q01/q99) or ``bounds`` (min/max) un-normalisation.
        invert_gripper: map the last action dimension ``g → -sign(2g - 1)`` (OpenVLA LIBERO checkpoints' gripper in
            [0, 1], 1 = open → robosuite's -1 open / +1 close). The only place the gripper sign is mapped: envs take
            env-scale actions (see :mod:`rlinf_core.models.conventions`).
    """

    unnorm_key: str | None = None
    action_dim: int | None = None
    num_action_chunks: int = 1
    normalization_type: NormalizationType = "bounds_q99"
    invert_gripper: bool = False

    def __post_init__(self) -> None:
        if int(self.num_action_chunks) < 1:
            raise ValueError(f"num_action_chunks must be >= 1, got {self.num_action_chunks}")
        if self.normalization_type not in NORMALIZATION_TYPES:
            raise ValueError(
                f"normalization_type {self.normalization_type!r} not supported; use {', '.join(NORMALIZATION_TYPES)}"
            )


@dataclass(frozen=True)
class InputConfig:
    """What the model is fed (YAML group ``inputs:``).

    Args:
        num_images_in_input: camera views fed: the main image, then ``wrist_images`` (OpenVLA: 1).
        use_proprio: OpenVLA-OFT only: feed ``Observation.states`` through the proprio projector as one extra
            token.
        proprio_dim: state size (default: from the proprio norm stats).
        max_prompt_length: pad prompts to this many tokens (None: longest in the batch).
        center_crop: OFT-style 90 % centre crop of the camera images. RLinf never applies it (its YAMLs'
            ``center_crop: True`` is read by nothing), so RLinf's checkpoints expect ``false``; SimpleVLA-RL's own
            evaluation of its SFT bases crops (see docs/configs.md).
        image_resize: how camera images are resized to the towers' input: ``tensor`` (RLinf's rollout: one bicubic
            antialiased resize of the tensor) or ``pil`` (``PIL.Image.resize``, bit-exact, as openvla/openvla's
            processor; official OFT's processor step). Default: recorded in the checkpoint's config.json, else
            ``pil`` when the directory has the HF processor's ``preprocessor_config.json``, ``tensor`` otherwise (a
            guess, printed in one line at load; see docs/configs.md). The checkpoint's
            ``image_resize_strategy`` (resize-naive / resize-crop / letterbox) is honoured in both.
    """

    num_images_in_input: int = 1
    use_proprio: bool = False
    proprio_dim: int | None = None
    max_prompt_length: int | None = None
    center_crop: bool = False
    image_resize: ImageResize | None = None

    def __post_init__(self) -> None:
        if int(self.num_images_in_input) < 1:
            raise ValueError(f"num_images_in_input must be >= 1, got {self.num_images_in_input}")
        if self.image_resize is not None and self.image_resize not in IMAGE_RESIZES:
            raise ValueError(f"image_resize must be one of {IMAGE_RESIZES}, got {self.image_resize!r}")


GROUPS = {"actions": ActionConfig, "inputs": InputConfig}
# RLinf's flat key → (group, field): accepted by from_pretrained and rlinf serve's --unnorm-key, named in the hint when
# a config uses one, and listed in the plugin README for readers of RLinf's YAMLs.
FLAT_KEYS: dict[str, tuple[str, str]] = {f.name: (group, f.name) for group, cls in GROUPS.items() for f in fields(cls)}

__all__ = ["ActionConfig", "FLAT_KEYS", "GROUPS", "InputConfig", "NORMALIZATION_TYPES"]
