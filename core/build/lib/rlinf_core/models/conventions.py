"""Action conventions: the one place where policy-side action scales are mapped to env scales.

rlinf's contract: :meth:`rlinf_core.Policy.act` returns env-scale actions and envs never reinterpret
them. A checkpoint trained with another convention (OpenVLA-family LIBERO checkpoints output the
gripper in [0, 1] with 1 = open; robosuite takes -1 = open, +1 = close) maps it in the policy,
with these functions, so the sign can never be flipped twice.
"""

from __future__ import annotations

import torch


def open_fraction_to_signed_gripper(actions: torch.Tensor) -> torch.Tensor:
    """``[..., D]`` with the last dimension in [0, 1] (1 = open) → robosuite's binarised ``-sign(2g - 1)``
    (-1 = open, +1 = close); the other dimensions are unchanged."""
    g = actions[..., -1]
    return torch.cat([actions[..., :-1], (-torch.sign(2 * g - 1)).unsqueeze(-1)], dim=-1)


def signed_gripper_to_open_fraction(actions: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`open_fraction_to_signed_gripper` on {-1, +1}: ``g → (1 - g) / 2`` (e.g. for SFT targets)."""
    return torch.cat([actions[..., :-1], ((1 - actions[..., -1]) / 2).unsqueeze(-1)], dim=-1)
