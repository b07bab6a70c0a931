"""Errors of the serving layer: a bad request is answered, never raised out of a server."""

from __future__ import annotations

from types import ModuleType

from rlinf_core.foundation.optional_deps import require


class BadRequest(ValueError):
    """A request the server refuses; the message is sent back to the client as is (one line)."""


class ServeError(RuntimeError):
    """Bad ``rlinf serve`` settings (printed as ``rlinf serve: error: ...``)."""


def serve_dependency(module: str) -> ModuleType:
    """Import a serving dependency, or raise ``MissingDependencyError`` with the install hint."""
    return require(module, "pip install 'rlinf-core[serve]'", "`rlinf serve`")
