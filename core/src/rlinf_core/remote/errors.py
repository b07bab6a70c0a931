"""Errors of a remote policy: one line naming the server, never a traceback (``rlinf: error: ...``)."""

from __future__ import annotations

from types import ModuleType

from rlinf_core.contracts.observation_mismatch import ObservationMismatch
from rlinf_core.foundation.optional_deps import require


class RemoteServerError(ObservationMismatch):
    """The server at ``url`` cannot serve this eval: unreachable past the reconnect window, no reply within the
    timeout too many times in a row, an error reply, a malformed reply, or metadata that disagrees with the env.

    An :class:`~rlinf_core.contracts.observation_mismatch.ObservationMismatch`: the eval cannot read actions for its
    observations, a one-line input error (:mod:`rlinf_core.cli.error_report`), not a bug.
    """

    def __init__(self, url: str, cause: str) -> None:
        first = (cause.strip().splitlines() or [""])[0]
        super().__init__(f"remote policy {url}: {first}")
        self.url = url
        self.cause = first


def remote_dependency(module: str) -> ModuleType:
    """Import a client dependency (the serving extra), or raise ``MissingDependencyError`` with the install hint."""
    return require(module, "pip install 'rlinf-core[serve]'", "RemotePolicy")
