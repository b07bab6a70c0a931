"""Cached tiny world-model directories for tests (this plugin's and other plugins')::

    from rlinf_wm_opensora.testing import tiny_world_model
    path = tiny_world_model()  # same kwargs → same directory

Directories live in a per-process temporary folder removed at exit.
"""

from __future__ import annotations

from pathlib import Path

from rlinf_core.testing.cache import cached_dir
from rlinf_wm_opensora.make_tiny import write_tiny

#: ``(n, depth)`` of the tiny STDiT3s' float32 passes (depth 2, hidden 32), for :mod:`rlinf_core.testing.numerics`:
#: the longest sum has 128 terms (the MLP), the longest path ~40 sums (2 blocks of spatial, temporal and action
#: cross-attention and MLP, ~16 sums each, plus the patch, time and action embeddings).
FLOAT32_SUMS = (128, 40)


def tiny_world_model(**kwargs) -> Path:
    """A tiny world model directory written once per process by :func:`rlinf_wm_opensora.make_tiny.write_tiny`."""

    return cached_dir(write_tiny, "opensora-tiny", **kwargs)
