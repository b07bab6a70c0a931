"""GPU memory of a world-model simulator (``rlinf memory``): weights, and the inference peak measured on meta.

A :class:`~rlinf_core.WorldModelEnv` keeps its world model and reward model on the training GPU next to the policy
for the whole run (frozen, no gradients, no optimizer state). What they add per GPU:

- weights: every parameter and buffer of the world model and the reward model, in the dtype each one runs in on
  that device (:meth:`WorldModel.memory_profile` casts a meta-built model first, e.g. bf16 for ``auto``);
- the inference peak of one env step: the model's real ``init_state`` (reset) and ``predict`` (one chunk: every
  denoising step of the DiT, the VAE encode and decode) and the reward model's ``success_prob`` on the chunk's
  ``batch × chunk`` frames are *run on the meta device* at released size, and :class:`PeakMode` records the
  largest sum of live tensors they create (outputs of every aten op, freed when Python drops them). The three
  phases run one after another, so the largest one counts.

Not counted: allocator fragmentation and cuDNN / cuBLAS workspaces (the estimate's CUDA-context rule of thumb
covers them), attention scores of fused kernels (meta runs SDPA's math path, which counts ``T²`` scores: an
over-estimate on GPUs with flash attention), the env's own state between steps (latent queues, a few MiB).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMode(TorchDispatchMode):
    """Tracks the bytes of live tensors created under it (views and in-place results not counted twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # returns the schema marks as aliases (views such as ``t`` / ``view``, in-place and ``out=`` results)
        # share an input's storage; ``_base`` is not set below autograd, so the schema is the source of truth
        aliases = [r.alias_info is not None for r in func._schema.returns]
        inputs = {id(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        outs = out if isinstance(out, (tuple, list)) and len(aliases) > 1 else [out]
        for i, o in enumerate(outs):
            alias = aliases[i] if i < len(aliases) else False
            for t in tree_flatten(o)[0]:
                if not isinstance(t, torch.Tensor) or alias or id(t) in inputs:
                    continue
                n = t.numel() * t.element_size()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, n)
        return out

    def _free(self, n: int) -> None:
        self.live -= n


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes of the tensors ``fn()`` creates (run it on meta tensors: no memory, shapes only)."""
    with torch.no_grad(), PeakMode() as mode:
        out = fn()
        del out
    return mode.peak


def module_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers (meta or real), each tensor once."""
    seen: set[int] = set()
    total = 0
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _dtype_name(module: nn.Module) -> str:
    dtypes = {p.dtype for p in module.parameters()}
    return (
        "/".join(sorted(str(d).replace("torch.", "").replace("float", "fp").replace("bfp16", "bf16") for d in dtypes))
        or "no parameters"
    )


@dataclass(frozen=True)
class WorldModelMemory:
    """What a world-model simulator adds per GPU (``WorldModel.memory_profile``, :func:`world_model_env_memory`).

    Args:
        weights: ``(label, bytes)`` of each resident model (``"STDiT3 (bf16)"``, ...), frozen.
        peaks: ``(phase, bytes)`` inference peaks of one env step (reset, chunk, reward); phases run one after
            another, so the largest counts.
        notes: caveats printed under the estimate.
    """

    weights: tuple[tuple[str, int], ...] = ()
    peaks: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def weight_bytes(self) -> int:
        return sum(b for _, b in self.weights)

    @property
    def peak(self) -> tuple[str, int]:
        """The largest ``(phase, bytes)`` peak (``("none", 0)`` when nothing was measured)."""
        return max(self.peaks, key=lambda p: p[1], default=("none", 0))

    def merged(self, other: WorldModelMemory) -> WorldModelMemory:
        return WorldModelMemory(self.weights + other.weights, self.peaks + other.peaks, self.notes + other.notes)


def require_meta(module: nn.Module, what: str) -> None:
    if any(not p.is_meta for p in module.parameters()):
        raise ValueError(
            f"{what}.memory_profile measures a meta-built model; build it inside rlinf_core.models.meta.meta_init()"
        )


def world_model_memory(
    world_model: nn.Module, batch: int, chunk: int, device_type: str = "cuda", image_size: int = 256
) -> WorldModelMemory:
    """Per-GPU memory of a meta-built world model stepping ``batch`` envs by ``chunk`` frames of ``image_size``
    pixels a side on ``device_type`` (the default of ``WorldModel.memory_profile``).

    Weights of each child module cast to the model's ``runtime_dtype(device_type)``, and the peaks of its real
    ``init_state`` (condition frames, zero actions) and ``predict`` run on the meta device. A model whose forward
    cannot run on meta gets a note instead of the peaks.
    """
    require_meta(world_model, type(world_model).__name__)
    dtype = world_model.runtime_dtype(device_type)
    if dtype is not None:
        nn.Module.to(world_model, dtype)  # meta: no memory moves
    weights = tuple(
        (f"{type(m).__name__} ({_dtype_name(m)})", module_bytes(m)) for _, m in world_model.named_children()
    )
    size = image_size
    T = world_model.condition.num_frames
    frames = torch.empty(batch, T, size, size, 3, dtype=torch.uint8, device="meta")
    cond_actions = torch.zeros(batch, T, world_model.action_dim, device="meta")
    actions = torch.zeros(batch, chunk, world_model.action_dim, device="meta")
    try:
        reset = peak_bytes(lambda: world_model.init_state(frames, cond_actions))
        with torch.no_grad():
            state = world_model.init_state(frames, cond_actions)
        step = peak_bytes(lambda: world_model.predict(state, actions))
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:  # e.g. .item() on a meta tensor
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        note = (
            f"{type(world_model).__name__}: inference peak not measured (its init_state / predict cannot run on the "
            f"meta device: {cause}); override memory_profile to report it"
        )
        return WorldModelMemory(weights, (), (note,))
    return WorldModelMemory(weights, ((f"reset, {batch} envs", reset), (f"chunk of {chunk}, {batch} envs", step)))


def reward_model_memory(reward_model: nn.Module, num_frames: int, image_size: int) -> WorldModelMemory:
    """Weights of a (meta-built) reward model as it runs, and the peak of scoring ``num_frames`` uint8 frames."""
    require_meta(reward_model, type(reward_model).__name__)
    name = type(reward_model).__name__
    weights = ((f"{name} ({_dtype_name(reward_model)})", module_bytes(reward_model)),)
    frames = torch.empty(num_frames, image_size, image_size, 3, dtype=torch.uint8, device="meta")
    tasks = getattr(reward_model, "tasks", None) or [""]
    texts = [tasks[0]] * num_frames
    try:
        peak = peak_bytes(lambda: reward_model.success_prob(frames, texts))
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return WorldModelMemory(weights, (), (f"{name}: inference peak not measured on the meta device ({cause})",))
    return WorldModelMemory(weights, ((f"reward model on {num_frames} frames", peak),))


def world_model_env_memory(
    world_model: nn.Module,
    reward_model: nn.Module,
    num_envs: int,
    chunk: int,
    device_type: str = "cuda",
    image_size: int = 256,
) -> WorldModelMemory:
    """Per-GPU memory of a :class:`~rlinf_core.WorldModelEnv`'s models (both built on meta; see the module docstring).

    Args:
        world_model: a :class:`~rlinf_core.WorldModel` built in :func:`rlinf_core.models.meta.meta_init`.
        reward_model: its reward model, built the same way.
        num_envs: envs the world model steps in one batch (the env's ``num_envs``).
        chunk: frames predicted per step (the policy's ``num_action_chunks``).
        device_type: the training device (``cuda``): sets the dtype ``auto`` precisions resolve to.
        image_size: side of the frames the reward model scores (the world model's ``image_size``).
    """
    wm = world_model.memory_profile(num_envs, chunk, device_type)
    return wm.merged(reward_model_memory(reward_model, num_envs * chunk, image_size))
