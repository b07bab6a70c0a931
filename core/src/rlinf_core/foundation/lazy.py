"""Lazy package attributes (PEP 562): a package lists ``name -> defining module`` and imports each on first use,
so that importing the package (a plugin's entry point, ``rlinf --help``) never pulls torch or Lightning."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_getattr(package: str, names: dict[str, str]) -> Callable[[str], object]:
    """The module-level ``__getattr__`` of ``package`` for the lazily imported ``names``::

    _LAZY = {"LiberoEnv": "rlinf_env_libero.env"}
    __getattr__ = lazy_getattr(__name__, _LAZY)
    """

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    return __getattr__
