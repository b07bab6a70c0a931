"""Build any policy or world model at full size without weights, memory or a GPU.

    from rlinf_core.models.meta import meta_init
    with meta_init():
        policy = OpenVLAOFTPolicy(model_path="/path/to/Openvla-oft-SFT-libero-spatial-traj1")
    n = sum(p.numel() for p in policy.parameters())  # 7.5 B, nothing allocated

Inside :func:`meta_init` every module is created on ``torch.device("meta")`` (shapes and dtypes,
no storage) and :func:`is_meta_init` is true. Plugins check :func:`is_meta_init` to skip reading
weight files (they still read configs, tokenizers and statistics, so the architecture is exactly
the one a real load builds). A meta-built model cannot run a forward pass; it is for inspecting
architectures, parameter counts, trainable sets and memory estimates.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import nn

_META: ContextVar[bool] = ContextVar("rlinf_meta_init", default=False)


@contextmanager
def meta_init() -> Iterator[None]:
    """Create modules on the meta device and tell plugins not to read weights."""
    token = _META.set(True)
    try:
        with torch.device("meta"):
            yield
    finally:
        _META.reset(token)


def is_meta_init() -> bool:
    """True inside :func:`meta_init`: build the architecture, skip loading weights."""
    return _META.get()


def parameter_count(module: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of parameters (meta or real), each shared tensor counted once."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


__all__ = ["is_meta_init", "meta_init", "parameter_count"]
