"""The policy's first ``act`` on an env's observations: a size the config got wrong is the user's input error, not
a bug, and gets a one-line cause (:mod:`rlinf_core.cli.error_report`)."""

from __future__ import annotations

import weakref
from typing import Any

_ACTED: weakref.WeakSet = weakref.WeakSet()  # policies whose first act succeeded


class ObservationMismatch(ValueError):
    """The policy cannot read the env's first observation (a state or image size the config got wrong): raised at
    the run's first ``act``, it stays a one-line input error inside training (:mod:`rlinf_core.cli.error_report`).
    A remote policy's server that cannot serve the eval is one too, at any ``act``
    (:class:`rlinf_core.remote.errors.RemoteServerError`)."""


def first_act(policy: Any, env: Any, act: Any) -> Any:
    """``act()``, with a ``ValueError`` of the policy's first call turned into :class:`ObservationMismatch` naming
    the policy and the env (later calls, and other errors, keep their traceback: they are bugs)."""
    if policy in _ACTED:
        return act()
    try:
        out = act()
    except ObservationMismatch:
        raise
    except ValueError as exc:
        env_name = type(getattr(env, "env", env)).__name__
        raise ObservationMismatch(
            f"policy {type(policy).__name__} cannot read the observations of env {env_name}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__} (make the "
            "policy's sizes, e.g. state_dim, match the env)"
        ) from exc
    _ACTED.add(policy)
    return out
