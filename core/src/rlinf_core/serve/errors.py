"""Errors of the serving layer: a bad request is answered, never raised out of a server."""

from __future__ import annotations

import importlib
from types import ModuleType


class BadRequest(ValueError):
    """A request the server refuses; the message is sent back to the client as is (one line)."""


class ServeError(RuntimeError):
    """Bad ``rlinf serve`` settings (printed as ``rlinf serve: error: ...``)."""


def require(module: str, package: str) -> ModuleType:
    """Import a serving dependency, or fail with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ServeError(f"`rlinf serve` needs the {package!r} package: pip install 'rlinf-core[serve]'") from None
