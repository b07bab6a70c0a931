"""The ResNet-18 success classifiers of RLinf's OpenSora and Wan world models, with their released key names.

Both are d2l-style ResNet-18s (``Residual`` blocks with ``conv1/conv2/conv3`` and ``bn1/bn2``) ending in a
sigmoid, trained to say whether a frame shows task success:

- :class:`ResnetRewardModel` (upstream ``ResnetRM`` / ``ResnetRewModel``, file ``resnet_rm.pth``): keys
  ``net.0.0.weight`` (stem conv) ... ``net.4.1.bn2.*`` (stage 5) and ``net.7.{weight,bias}`` (``Linear(512, 1)``).
- :class:`TaskEmbedResnetRewardModel` (upstream ``TaskEmbedResnetRewModel``, Wan LIBERO-Goal,
  ``taskemb_resnet_rm.pth``): ``visual_encoder.*`` (the same ResNet without its head), ``task_embedding.weight``
  (``Embedding(10, 64)``) and ``fusion_layer.{0,3}.*`` (``Linear(576, 256)`` → ReLU → Dropout(0.1) →
  ``Linear(256, 1)`` → Sigmoid). The task id is the index of the instruction in the suite's task list
  (:data:`LIBERO_TASKS`), matched exactly after stripping surrounding whitespace.

Input: frames in ``[-1, 1]`` (``uint8 / 127.5 - 1``), clamped, in float32 (autocast off), at any size (the
released models saw 256×256 frames).

The success rule, upstream and here. Upstream rounds the probability (``predict_rew = round(sigmoid)``, so a
frame counts when p > 0.5; ``torch.round(0.5) == 0``); a chunk succeeds when its max rounded value is
≥ 0.9 (``success_reward_threshold``), i.e. when some frame has p > 0.5, and the episode terminates at the
end of that chunk; with ``use_rel_reward`` the reward of frame i is ``reward_coef · (r_i − r_{i−1})`` on the
rounded values, carried across chunks. In :class:`rlinf_core.envs.world_model_env.WorldModelEnv` the same decision is
``success_threshold: 0.5`` (a frame counts when p ≥ 0.5; :data:`UPSTREAM_SUCCESS_THRESHOLD` makes it p > 0.5
exactly), ``success_frames: 1``, ``use_rel_reward: true`` and ``reward_coef: 5`` (OpenSora). Two deliberate
differences: the episode ends on the successful frame (not at the end of its chunk), and the relative reward
is of the running success indicator, so it pays ``reward_coef`` once at the first success (upstream's
telescoping sum pays ``reward_coef · r_last``, which is the same whenever the last frame still succeeds, and
can go negative when a later frame of the chunk falls back under 0.5).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlinf_core.contracts.world_model import RewardModel
from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.settings import SETTINGS_KEY, SavedSettings
from rlinf_core.run.checkpoint_files import load_pth_state_dict

__all__ = [
    "LIBERO_TASKS",
    "UPSTREAM_SUCCESS_THRESHOLD",
    "ResnetRewardModel",
    "TaskEmbedResnetRewardModel",
    "load_reward_model",
]

#: ``WorldModelEnv.success_threshold`` for which ``p >= threshold`` is upstream's ``round(p) == 1`` (p > 0.5)
#: for every float32 probability: the next float32 above 0.5.
UPSTREAM_SUCCESS_THRESHOLD = float(np.nextafter(np.float32(0.5), np.float32(1.0)))

#: The task lists of the LIBERO suites, in the order of upstream's task ids (``instruction_to_task_id``).
LIBERO_TASKS: dict[str, tuple[str, ...]] = {
    "libero_goal": (
        "open the middle drawer of the cabinet",
        "open the top drawer and put the bowl inside",
        "push the plate to the front of the stove",
        "put the bowl on the plate",
        "put the bowl on the stove",
        "put the bowl on top of the cabinet",
        "put the cream cheese in the bowl",
        "put the wine bottle on the rack",
        "put the wine bottle on top of the cabinet",
        "turn on the stove",
    ),
    "libero_10": (
        "pick up the book and place it in the back compartment of the caddy",
        "put both moka pots on the stove",
        "put both the alphabet soup and the cream cheese box in the basket",
        "put both the alphabet soup and the tomato sauce in the basket",
        "put both the cream cheese box and the butter in the basket",
        "put the black bowl in the bottom drawer of the cabinet and close it",
        "put the white mug on the left plate and put the yellow and white mug on the right plate",
        "put the white mug on the plate and put the chocolate pudding to the right of the plate",
        "put the yellow and white mug in the microwave and close it",
        "turn on the stove and put the moka pot on it",
    ),
    "libero_spatial": (
        "pick up the black bowl between the plate and the ramekin and place it on the plate",
        "pick up the black bowl from table center and place it on the plate",
        "pick up the black bowl in the top drawer of the wooden cabinet and place it on the plate",
        "pick up the black bowl next to the cookie box and place it on the plate",
        "pick up the black bowl next to the plate and place it on the plate",
        "pick up the black bowl next to the ramekin and place it on the plate",
        "pick up the black bowl on the cookie box and place it on the plate",
        "pick up the black bowl on the ramekin and place it on the plate",
        "pick up the black bowl on the stove and place it on the plate",
        "pick up the black bowl on the wooden cabinet and place it on the plate",
    ),
    "libero_object": (
        "pick up the alphabet soup and place it in the basket",
        "pick up the bbq sauce and place it in the basket",
        "pick up the butter and place it in the basket",
        "pick up the chocolate pudding and place it in the basket",
        "pick up the cream cheese and place it in the basket",
        "pick up the ketchup and place it in the basket",
        "pick up the milk and place it in the basket",
        "pick up the orange juice and place it in the basket",
        "pick up the salad dressing and place it in the basket",
        "pick up the tomato sauce and place it in the basket",
    ),
}


class Residual(nn.Module):
    """d2l residual block: two 3×3 convs with BatchNorm, a strided 1×1 ``conv3`` shortcut when it downsamples."""

    def __init__(self, in_channels: int, channels: int, downsample: bool = False) -> None:
        super().__init__()
        stride = 2 if downsample else 1
        self.conv1 = nn.Conv2d(in_channels, channels, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(in_channels, channels, kernel_size=1, stride=stride) if downsample else None
        self.bn1 = nn.BatchNorm2d(channels)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def resnet18_trunk() -> list[nn.Module]:
    """The d2l ResNet-18 up to its 512-d pooled feature: ``[N, 3, H, W]`` → ``[N, 512]`` (7 modules)."""
    stem = nn.Sequential(
        nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
    )
    stages = [nn.Sequential(Residual(64, 64), Residual(64, 64))]
    for cin, cout in ((64, 128), (128, 256), (256, 512)):
        stages.append(nn.Sequential(Residual(cin, cout, downsample=True), Residual(cout, cout)))
    return [stem, *stages, nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten()]


def frames_to_input(frames: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``uint8 [N, H, W, 3]`` (or float in [0, 255]) → float32 ``[N, 3, H, W]`` in ``[-1, 1]`` on ``device``."""
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"reward models take frames [N, H, W, 3], got {list(frames.shape)}")
    x = frames.to(device=device, dtype=torch.float32).permute(0, 3, 1, 2)
    return (x / 127.5 - 1.0).clamp(-1.0, 1.0)


class _PthRewardModel(SavedSettings, RewardModel):
    """Shared parts: fp32 forward without autocast, ``.pth`` load / save with strict key checks. The ``.pth`` holds
    the raw state dict, as upstream's; the constructor settings, if any, are recorded beside it (``<name>.json``),
    so a model built on the file gets them back (:class:`~rlinf_core.models.settings.SavedSettings`)."""

    #: file name of the exported checkpoint in a world-model directory.
    checkpoint_name: str = "reward_model.pth"
    SETTINGS_FROM = "checkpoint"

    @classmethod
    def settings_file(cls, location: str | Path) -> Path:
        return Path(location).with_suffix(".json")

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides):
        """The model in the file :meth:`save_pretrained` returned, or in the directory it was given."""
        path = Path(path)
        return super().from_pretrained(path / cls.checkpoint_name if path.is_dir() else path, **overrides)

    def success_logits(self, frames: torch.Tensor, instructions: list[str] | None = None) -> torch.Tensor:
        """``float32 [N]`` logits (before the sigmoid) for frames ``uint8 [N, H, W, 3]``; computed in the weights'
        dtype (float32 as upstream, unless the model itself was cast), never under autocast."""
        p = next(self.parameters())
        with torch.autocast("cpu" if p.is_meta else p.device.type, enabled=False):  # meta: rlinf memory
            return self._logits(frames_to_input(frames, p.device).to(p.dtype), instructions).float()

    def success_prob(self, frames: torch.Tensor, instructions: list[str] | None = None) -> torch.Tensor:
        return torch.sigmoid(self.success_logits(frames, instructions))

    def _logits(self, x: torch.Tensor, instructions: list[str] | None) -> torch.Tensor:
        raise NotImplementedError

    def load_checkpoint(self, path: str | Path) -> None:
        """Load a ``.pth`` holding a raw state dict or ``{"model_state_dict": ...}`` (strict keys)."""
        load_state_strict(self, load_pth_state_dict(path, "reward model checkpoint"), path)

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the raw state dict to ``path`` (a ``.pth`` file, or a directory that gets ``checkpoint_name``) and
        the constructor settings beside it; returns the file."""
        path = Path(path)
        if path.suffix not in (".pth", ".pt"):
            path = path / self.checkpoint_name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({k: v.detach().cpu() for k, v in self.state_dict().items()}, tmp)
        tmp.replace(path)
        record = self.settings_record()
        if len(record) > 1:  # settings besides the class name
            self.settings_file(path).write_text(json.dumps({SETTINGS_KEY: record}, indent=2) + "\n")
        return path


class ResnetRewardModel(_PthRewardModel):
    """Frame success classifier of the OpenSora and Wan world models (upstream ``ResnetRM`` / ``ResnetRewModel``).

    Args:
        checkpoint: a ``resnet_rm.pth`` to load (strict keys); ``None``: random initialisation (training,
            tiny tests).
    """

    checkpoint_name = "resnet_rm.pth"

    def __init__(self, checkpoint: str | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(*resnet18_trunk(), nn.Linear(512, 1), nn.Sigmoid())
        if checkpoint is not None and not is_meta_init():  # meta builds (rlinf memory) read no file
            self.load_checkpoint(checkpoint)

    def _logits(self, x: torch.Tensor, instructions: list[str] | None) -> torch.Tensor:
        return self.net[:-1](x).squeeze(-1)

    @torch.no_grad()
    def predict_rew(self, obs: torch.Tensor) -> torch.Tensor:
        """Upstream's ``predict_rew``: ``round(sigmoid)`` ``[N, 1]`` of float frames ``[N, 3, H, W]`` in [-1, 1]."""
        return torch.round(self.net(obs.clamp(-1.0, 1.0).float()))


class TaskEmbedResnetRewardModel(_PthRewardModel):
    """Task-conditioned success classifier of Wan LIBERO-Goal (upstream ``TaskEmbedResnetRewModel``).

    Args:
        checkpoint: a ``taskemb_resnet_rm.pth`` to load (strict keys); ``None``: random initialisation.
        task_suite: the suite whose task list maps instructions to task ids (a key of :data:`LIBERO_TASKS`);
            ignored when ``tasks`` is given.
        tasks: the instruction of each task id, in id order (your own tasks); default: the suite's list.
        num_tasks: rows of the task embedding (upstream: 10).
        task_embed_dim: task embedding size (upstream: 64).
    """

    checkpoint_name = "taskemb_resnet_rm.pth"

    def __init__(
        self,
        checkpoint: str | None = None,
        task_suite: str = "libero_goal",
        tasks: list[str] | None = None,
        num_tasks: int = 10,
        task_embed_dim: int = 64,
    ) -> None:
        super().__init__()
        if tasks is None:
            if task_suite not in LIBERO_TASKS:
                raise ValueError(f"unknown task_suite {task_suite!r}; known: {sorted(LIBERO_TASKS)} (or pass tasks)")
            tasks = list(LIBERO_TASKS[task_suite])
        if len(tasks) > num_tasks:
            raise ValueError(f"{len(tasks)} tasks but the task embedding has num_tasks={num_tasks} rows")
        self.task_suite = task_suite
        self.tasks = [str(t).strip() for t in tasks]
        self._task_ids = {t: i for i, t in enumerate(self.tasks)}
        self.visual_encoder = nn.Sequential(*resnet18_trunk())
        self.task_embedding = nn.Embedding(num_tasks, task_embed_dim)
        self.fusion_layer = nn.Sequential(
            nn.Linear(512 + task_embed_dim, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 1), nn.Sigmoid()
        )
        if checkpoint is not None and not is_meta_init():  # meta builds (rlinf memory) read no file
            self.load_checkpoint(checkpoint)

    def task_ids(self, instructions: list[str] | None, n: int) -> torch.Tensor:
        """``int64 [n]`` task ids of ``n`` instructions (exact match after stripping whitespace)."""
        if instructions is None or len(instructions) != n:
            got = "none" if instructions is None else len(instructions)
            raise ValueError(f"TaskEmbedResnetRewardModel needs one instruction per frame ({n}), got {got}")
        ids = []
        for text in instructions:
            text = (text.decode() if isinstance(text, bytes) else str(text)).strip()
            if text not in self._task_ids:
                raise ValueError(
                    f"instruction {text!r} is not a task of TaskEmbedResnetRewardModel (task_suite "
                    f"{self.task_suite!r}); known: {self.tasks}"
                )
            ids.append(self._task_ids[text])
        return torch.tensor(ids, dtype=torch.long)

    def _logits(self, x: torch.Tensor, instructions: list[str] | None) -> torch.Tensor:
        ids = self.task_ids(instructions, len(x)).to(x.device)
        features = torch.cat([self.visual_encoder(x), self.task_embedding(ids)], dim=1)
        return self.fusion_layer[:-1](features).squeeze(-1)


def load_state_strict(model: nn.Module, state: dict[str, torch.Tensor], path: str | Path) -> None:
    """``model.load_state_dict(state)`` with one-line errors naming the first missing / unexpected / misshapen key."""
    expected = model.state_dict()
    # BatchNorm's num_batches_tracked is a counter, not a weight: a checkpoint without it still loads
    missing = [k for k in expected if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in expected]
    layout = f"the {type(model).__name__} layout ({next(iter(expected))}, ...)"
    if missing:
        raise ValueError(f"{path}: missing key {missing[0]!r} ({len(missing)} missing); expected {layout}")
    if unexpected:
        raise ValueError(f"{path}: unexpected key {unexpected[0]!r} ({len(unexpected)} unexpected); expected {layout}")
    for key, value in state.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            raise ValueError(
                f"{path}: key {key!r} has shape {list(value.shape)}, {type(model).__name__} expects "
                f"{list(expected[key].shape)}"
            )
    model.load_state_dict(state, strict=False)


def load_reward_model(path: str | Path, **kwargs) -> ResnetRewardModel | TaskEmbedResnetRewardModel:
    """The reward model in a ``.pth`` file, its class told by its keys (``net.*`` or ``visual_encoder.*``).

    Args:
        path: ``resnet_rm.pth`` / ``taskemb_resnet_rm.pth`` (raw state dict or ``{"model_state_dict": ...}``).
        **kwargs: :class:`TaskEmbedResnetRewardModel` arguments (``task_suite``, ``tasks``; default: the ones
            recorded beside the file, else the suite's).
    """
    state = load_pth_state_dict(path, "reward model checkpoint")
    if any(k.startswith("net.") for k in state):
        if kwargs:
            raise ValueError(f"{path} is a ResnetRewardModel checkpoint; it takes no arguments (got {sorted(kwargs)})")
        return ResnetRewardModel.from_pretrained(path).eval()
    if any(k.startswith("visual_encoder.") for k in state):
        emb = state.get("task_embedding.weight")
        if emb is None:
            raise ValueError(f"{path}: missing key 'task_embedding.weight' of the TaskEmbedResnetRewardModel layout")
        sizes = {"num_tasks": emb.shape[0], "task_embed_dim": emb.shape[1]}
        return TaskEmbedResnetRewardModel.from_pretrained(path, **sizes, **kwargs).eval()
    first = next(iter(state), "<empty>")
    raise ValueError(
        f"{path}: neither a ResnetRewardModel ('net.*' keys) nor a TaskEmbedResnetRewardModel "
        f"('visual_encoder.*' keys) checkpoint; first key {first!r}"
    )
