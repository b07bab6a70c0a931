"""Cached tiny checkpoints for tests (this plugin's and other plugins')::

    from rlinf_policy_openvla.testing import tiny_checkpoint
    path = tiny_checkpoint(action_dim=4, norm_keys=["metaworld"])  # same kwargs → same directory

Directories live in a per-process temporary folder removed at exit.
"""

from __future__ import annotations

from pathlib import Path

from rlinf_core.testing.cache import cached_dir
from rlinf_policy_openvla.make_tiny import make_tiny


def tiny_checkpoint(**kwargs) -> Path:
    """A tiny checkpoint written once per process by :func:`rlinf_policy_openvla.make_tiny.make_tiny`."""

    return cached_dir(make_tiny, "openvla-tiny", **kwargs)
