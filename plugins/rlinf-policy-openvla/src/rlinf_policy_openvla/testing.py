"""Cached tiny checkpoints for tests (this plugin's and other plugins')::

    from rlinf_policy_openvla.testing import tiny_checkpoint
    path = tiny_checkpoint(action_dim=4, norm_keys=["metaworld"])  # same kwargs → same directory

Directories live in a per-process temporary folder removed at exit.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

_CACHE: dict[str, Path] = {}
_ROOT: list[Path] = []


def tiny_checkpoint(**kwargs) -> Path:
    """A tiny checkpoint written once per process by :func:`rlinf_policy_openvla.make_tiny.make_tiny`."""
    from rlinf_policy_openvla.make_tiny import make_tiny

    key = json.dumps(kwargs, sort_keys=True, default=str)
    if key not in _CACHE:
        if not _ROOT:
            _ROOT.append(Path(tempfile.mkdtemp(prefix="rlinf-openvla-tiny-")))
            atexit.register(shutil.rmtree, _ROOT[0], True)
        _CACHE[key] = make_tiny(_ROOT[0] / f"ckpt{len(_CACHE)}", **kwargs)
    return _CACHE[key]
