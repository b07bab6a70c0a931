"""A tiny world model and reward model, for tests of the world-model env path.

The "video model" translates the current frame by the commanded (x, y) motion and passes it
through a 1×1 convolution (frozen in the env, trainable by
:class:`rlinf_core.supervised.world_model_trainers.WorldModelTrainer`); the reward model scores how bright the
image centre is. :func:`write_toy_init_states` writes the initial states of the toy task they make together (move a
light square onto the centre), shipped beside ``toy/grpo_in_world_model.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from rlinf_core.contracts.world_model import ConditionSpec, RewardModel, WorldModel
from rlinf_core.models.settings import SETTINGS_KEY, SavedSettings
from rlinf_core.run.checkpoint_files import load_safetensors
from rlinf_core.world_models.init_data import save_init_trajectory


class ToyWorldModel(SavedSettings, WorldModel):
    """Shifts the last frame by ``round(action[:2] · pixels_per_unit)`` per predicted frame.

    Args:
        action_dim: action size (the first two entries move the image).
        pixels_per_unit: pixels moved per unit action.
        num_condition_frames: condition frames taken from the init data.
        condition_frames: ``repeat_first`` (OpenSora-like) or ``first_and_last`` (Wan-like keyframe init).
        pad_gripper: gripper entry of padded condition actions (``None``: zeros).
        num_target_frames: target frames of a training clip (``clip_frames = (num_condition_frames, this)``).
        model_path: load the weights from this directory (``save_pretrained`` layout); a setting left at its
            default takes the value recorded there.
    """

    def __init__(
        self,
        action_dim: int = 2,
        pixels_per_unit: float = 2.0,
        num_condition_frames: int = 1,
        condition_frames: str = "repeat_first",
        pad_gripper: float | None = None,
        num_target_frames: int = 2,
        model_path: str | None = None,
    ) -> None:
        super().__init__()
        if model_path is not None and not (Path(model_path) / "model.safetensors").is_file():
            raise FileNotFoundError(
                f"ToyWorldModel model_path {model_path} has no model.safetensors (save_pretrained layout)"
            )
        self.model_path = model_path
        self.action_dim = action_dim
        self.pixels_per_unit = pixels_per_unit
        self.condition = ConditionSpec(num_condition_frames, condition_frames, pad_gripper)
        self.clip_frames = (num_condition_frames, num_target_frames)
        self.mix = nn.Conv2d(3, 3, 1)
        with torch.no_grad():
            self.mix.weight.copy_(torch.eye(3).view(3, 3, 1, 1))
            self.mix.bias.zero_()
        if model_path is not None:
            self.load_state_dict(load_safetensors(Path(model_path) / "model.safetensors"))

    def save_pretrained(self, path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({SETTINGS_KEY: self.settings_record()}, indent=2))
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(path / "model.safetensors"))

    def _shift(self, frames: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``[B, H, W, 3]`` frames rolled by ``round(actions[:, :2] · pixels_per_unit)`` (x, y)."""
        shift = (actions[:, :2] * self.pixels_per_unit).round().long()
        return torch.stack([torch.roll(f, (int(dy), int(dx)), dims=(0, 1)) for f, (dx, dy) in zip(frames, shift)])

    def training_loss(self, frames, actions, generator=None):
        """MSE (in [0, 1] units) of each target frame predicted from the frame before it and its action."""
        Nc = self.clip_frames[0]
        losses = []
        for t in range(Nc, frames.shape[1]):
            x = self._shift(frames[:, t - 1], actions[:, t]).permute(0, 3, 1, 2).float()
            pred = self.mix(x) / 255.0
            target = frames[:, t].permute(0, 3, 1, 2).float() / 255.0
            losses.append(torch.nn.functional.mse_loss(pred, target))
        return torch.stack(losses).mean()

    def init_state(self, frames, actions):
        return frames[:, -1].clone()

    def predict(self, state, actions, generator=None):
        out = []
        frame = state
        for c in range(actions.shape[1]):
            x = self._shift(frame, actions[:, c]).permute(0, 3, 1, 2).float()
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


#: the toy task's instructions and the unit step (dx, dy) each one asks for
TOY_DIRECTIONS = {
    "move the light square left": (-1, 0),
    "move the light square right": (1, 0),
    "move the light square up": (0, -1),
    "move the light square down": (0, 1),
}


def write_toy_init_states(root: str | Path, image_size: int = 16) -> list[Path]:
    """Initial states of the toy task of :class:`ToyWorldModel` and :class:`ToyRewardModel` (defaults): a 4 × 4
    light square on a dark frame, 3 to 6 pixels from the centre, to be moved onto it in the instructed direction.

    Four tasks (:data:`TOY_DIRECTIONS`), eight files each (distances 3-6, off the axis by 0 or 1 pixel), written
    as ``root/traj<task><trial>.npy`` with zero 2-D actions; returns the files.
    """
    S, side = image_size, 4
    centre = S // 2 - side // 2  # the square's top-left corner when it covers the reward model's centre patch
    out = []
    for task, (instruction, (dx, dy)) in enumerate(TOY_DIRECTIONS.items()):
        for trial, (distance, off_axis) in enumerate((d, o) for d in (3, 4, 5, 6) for o in (0, 1)):
            # start on the far side: moving (dx, dy) for `distance` pixels covers the centre
            x = centre - dx * distance + (off_axis if dx == 0 else 0)
            y = centre - dy * distance + (off_axis if dy == 0 else 0)
            frame = np.full((1, S, S, 3), 30, np.uint8)
            frame[0, y : y + side, x : x + side] = 255
            path = Path(root) / f"traj{task}{trial}.npy"
            out.append(save_init_trajectory(path, frame, instruction, np.zeros((1, 2), np.float32)))
    return out
