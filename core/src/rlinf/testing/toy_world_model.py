"""A tiny world model and reward model, for tests of the world-model env path.

The "video model" translates the current frame by the commanded (x, y) motion and passes it
through a frozen 1×1 convolution; the reward model scores how bright the image centre is.
"""

from __future__ import annotations

import torch
from torch import nn

from rlinf.world_models.base import RewardModel, WorldModel
from rlinf.world_models.init_data import ConditionSpec


class ToyWorldModel(WorldModel):
    """Shifts the last frame by ``round(action[:2] · pixels_per_unit)`` per predicted frame.

    Args:
        action_dim: action size (the first two entries move the image).
        pixels_per_unit: pixels moved per unit action.
        num_condition_frames: condition frames taken from the init data.
        condition_frames: ``repeat_first`` (OpenSora-like) or ``first_and_last`` (Wan-like keyframe init).
        pad_gripper: gripper entry of padded condition actions (``None``: zeros).
    """

    def __init__(
        self,
        action_dim: int = 2,
        pixels_per_unit: float = 2.0,
        num_condition_frames: int = 1,
        condition_frames: str = "repeat_first",
        pad_gripper: float | None = None,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.pixels_per_unit = pixels_per_unit
        self.condition = ConditionSpec(num_condition_frames, condition_frames, pad_gripper)
        self.mix = nn.Conv2d(3, 3, 1)
        with torch.no_grad():
            self.mix.weight.copy_(torch.eye(3).view(3, 3, 1, 1))
            self.mix.bias.zero_()

    def init_state(self, frames, actions):
        return frames[:, -1].clone()

    def predict(self, state, actions, generator=None):
        out = []
        frame = state
        for c in range(actions.shape[1]):
            shift = (actions[:, c, :2] * self.pixels_per_unit).round().long()
            moved = torch.stack([torch.roll(f, (int(dy), int(dx)), dims=(0, 1)) for f, (dx, dy) in zip(frame, shift)])
            x = moved.permute(0, 3, 1, 2).float()
            frame = self.mix(x).clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1)
            out.append(frame)
        return torch.stack(out, dim=1), frame

    def select(self, state, env_ids):
        return state[env_ids]

    def assign(self, state, env_ids, new):
        state = state.clone()
        state[env_ids] = new
        return state


class ToyRewardModel(RewardModel):
    """Success probability from the brightness of the central patch.

    Args:
        patch: side of the central patch, pixels.
        threshold: mean brightness (0-255) at which the probability is 0.5.
    """

    def __init__(self, patch: int = 4, threshold: float = 128.0) -> None:
        super().__init__()
        self.patch = patch
        self.threshold = threshold
        self.scale = nn.Parameter(torch.tensor(0.2), requires_grad=False)

    def success_prob(self, frames, instructions=None):
        H, W = frames.shape[1:3]
        p = self.patch
        centre = frames[:, H // 2 - p // 2 : H // 2 + (p + 1) // 2, W // 2 - p // 2 : W // 2 + (p + 1) // 2]
        return torch.sigmoid(self.scale * (centre.float().mean((1, 2, 3)) - self.threshold))
