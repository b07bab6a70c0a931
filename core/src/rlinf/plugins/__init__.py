"""Plugin discovery and registration (pluggy, entry-point group ``rlinf``)."""

from rlinf.plugins.hookspecs import hookimpl, hookspec
from rlinf.plugins.manager import (
    PluginError,
    PluginInfo,
    Registry,
    get_registry,
    load_plugins,
)

__all__ = ["PluginError", "PluginInfo", "Registry", "get_registry", "hookimpl", "hookspec", "load_plugins"]
