"""Test helpers (this plugin's tests and other plugins')::

    from rlinf_policy_openpi.testing import FLOAT32_SUMS, make_inputs, tiny_checkpoint
    path = tiny_checkpoint(pi05=True, layout="rlinf")  # same kwargs → same directory

Directories live in a per-process temporary folder removed at exit.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlinf_core.testing.cache import cached_dir
from rlinf_policy_openpi.make_tiny import make_tiny

#: ``(n, depth)`` of the tiny checkpoints' float32 passes, for :mod:`rlinf_core.testing.numerics`: the longest sum
#: has n = 588 terms (a 14 x 14 x 3 SigLIP patch; attention over at most 212 prefix keys, MLPs of 128), and the
#: longest path takes ~60 sums in a row (SigLIP, Gemma and the expert: 2 layers each of ~9 sums, plus the patch,
#: projector and action projections).
FLOAT32_SUMS = (588, 60)


def tiny_checkpoint(**kwargs) -> Path:
    """A tiny checkpoint written once per process by :func:`rlinf_policy_openpi.make_tiny.make_tiny`."""

    return cached_dir(make_tiny, "openpi-tiny", **kwargs)


def make_inputs(config, batch: int = 3, seed: int = 0, pad_from: int = 5) -> tuple:
    """Random model inputs: 3 camera slots (slot 1 missing for sample 1, slot 2 missing for all), prompt tokens
    with sample 0 padded from ``pad_from``."""
    gen = torch.Generator().manual_seed(seed)
    size = config.vision.image_size
    images = [torch.rand(batch, 3, size, size, generator=gen) * 2 - 1 for _ in range(config.num_images)]
    masks = [torch.ones(batch, dtype=torch.bool) for _ in range(config.num_images)]
    masks[1][min(1, batch - 1)] = False
    masks[2][:] = False
    length = config.max_token_len
    tokens = torch.randint(4, config.vocab_size, (batch, length), generator=gen)
    token_masks = torch.ones(batch, length, dtype=torch.bool)
    tokens[0, pad_from:], token_masks[0, pad_from:] = 0, False
    state = torch.randn(batch, config.action_dim, generator=gen)
    x_t = torch.randn(batch, config.action_horizon, config.action_dim, generator=gen)
    t = torch.rand(batch, generator=gen)
    return images, masks, tokens, token_masks, state, x_t, t
