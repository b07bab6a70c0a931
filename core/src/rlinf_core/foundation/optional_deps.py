"""Optional dependencies: a missing one becomes one line naming the feature and the install command."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependencyError(ImportError):
    """An optional dependency of a plugin or feature is not installed."""


def require(module: str, install: str, feature: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` with the install command.

    Args:
        module: dotted module name, e.g. ``"peft"``.
        install: what to run, e.g. ``"pip install 'peft>=0.17'"``.
        feature: what needs it (default: the module name), e.g. ``"LoRA"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature or module} needs {module} ({exc}); install it with `{install}`"
        ) from None
