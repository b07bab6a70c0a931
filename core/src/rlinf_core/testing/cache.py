"""Tiny model directories written once per process and shared by tests (every plugin's ``testing.py``).

``cached_dir(write, prefix, **kwargs)`` calls ``write(directory, **kwargs)`` the first time it sees ``kwargs``
and returns the same directory afterwards. Directories live in one temporary folder per ``prefix``, removed
at exit.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

_CACHE: dict[tuple[str, str], Path] = {}
_ROOTS: dict[str, Path] = {}


def cached_dir(write: Callable[..., Path | None], prefix: str, **kwargs) -> Path:
    """The directory ``write(dir, **kwargs)`` filled, written once per process per (``prefix``, kwargs)."""
    key = (prefix, json.dumps(kwargs, sort_keys=True, default=str))
    if key not in _CACHE:
        if prefix not in _ROOTS:
            _ROOTS[prefix] = Path(tempfile.mkdtemp(prefix=f"rlinf-{prefix}-"))
            atexit.register(shutil.rmtree, _ROOTS[prefix], True)
        target = _ROOTS[prefix] / f"d{sum(k[0] == prefix for k in _CACHE)}"
        written = write(target, **kwargs)
        _CACHE[key] = Path(written) if written is not None else target
    return _CACHE[key]
