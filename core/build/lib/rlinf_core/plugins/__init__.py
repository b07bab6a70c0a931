"""Plugin discovery and registration (pluggy, entry-point group ``rlinf``)."""

from rlinf_core.plugins.hookspecs import hookimpl, hookspec
from rlinf_core.plugins.manager import (
    PluginError,
    PluginInfo,
    Registry,
    get_registry,
    load_plugins,
)

__all__ = ["PluginError", "PluginInfo", "Registry", "get_registry", "hookimpl", "hookspec", "load_plugins"]
