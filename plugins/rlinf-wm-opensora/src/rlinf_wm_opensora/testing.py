"""Cached tiny world-model directories for tests (this plugin's and other plugins')::

    from rlinf_wm_opensora.testing import tiny_world_model
    path = tiny_world_model()  # same kwargs → same directory

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


def tiny_world_model(**kwargs) -> Path:
    """A tiny world model directory written once per process by :func:`rlinf_wm_opensora.make_tiny.write_tiny`."""
    from rlinf_wm_opensora.make_tiny import write_tiny

    key = json.dumps(kwargs, sort_keys=True, default=str)
    if key not in _CACHE:
        if not _ROOT:
            _ROOT.append(Path(tempfile.mkdtemp(prefix="rlinf-opensora-tiny-")))
            atexit.register(shutil.rmtree, _ROOT[0], True)
        _CACHE[key] = write_tiny(_ROOT[0] / f"wm{len(_CACHE)}", **kwargs)
    return _CACHE[key]
