"""Cached tiny world-model directories for tests (this plugin's and other plugins')::

    from rlinf_wm_opensora.testing import tiny_world_model
    path = tiny_world_model()  # same kwargs → same directory

Directories live in a per-process temporary folder removed at exit.
"""

from __future__ import annotations

from pathlib import Path

from rlinf_core.testing.cache import cached_dir
from rlinf_wm_opensora.make_tiny import write_tiny


def tiny_world_model(**kwargs) -> Path:
    """A tiny world model directory written once per process by :func:`rlinf_wm_opensora.make_tiny.write_tiny`."""

    return cached_dir(write_tiny, "opensora-tiny", **kwargs)
