"""Loads plugins from entry points and owns the class registry.

Operator controls (environment variables):

- ``RLINF_LOAD_PLUGINS``: comma-separated entry-point or distribution names to load; set but empty
  loads no third-party plugin (the built-in ``core`` plugin is always loaded).
- ``RLINF_BLOCK_PLUGINS``: comma-separated entry-point or distribution names to skip.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points, version
from types import ModuleType
from typing import Any

import pluggy

from rlinf_core.plugins import hookspecs
from rlinf_core.plugins.entries import (
    KINDS,
    RESERVED_COMMANDS,
    Command,
    PluginError,
    Registered,
    _check_base,
    moved_package_cause,
)

BUILTIN_PLUGINS = {"core": "rlinf_core.builtin.plugin"}
CORE_DISTRIBUTION = "rlinf-core"


@dataclass
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    registered: list[Registered] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "registered": {kind: [r.name for r in self.registered if r.kind == kind] for kind in KINDS},
            "error": self.error,
        }


def _split_env(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {v.strip() for v in value.split(",") if v.strip()}


def _dist_of(ep: EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown", "?"
    return dist.metadata["Name"], dist.version


class Registry:
    """Every class registered by a plugin, by short name, plus the plugin table."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.classes: dict[str, Registered] = {}
        self.commands: dict[str, Command] = {}

    # -- loading ---------------------------------------------------------------------------
    def load(self, entry_points_: list[EntryPoint] | None = None) -> Registry:
        for name, module in BUILTIN_PLUGINS.items():
            version = _core_version()
            self._add(name, module, CORE_DISTRIBUTION, version, loader=lambda m=module: importlib.import_module(m))
        load_only = _split_env("RLINF_LOAD_PLUGINS")
        block = _split_env("RLINF_BLOCK_PLUGINS") or set()
        eps = entry_points_ if entry_points_ is not None else list(entry_points(group=hookspecs.PROJECT))
        known = {ep.name for ep in eps} | {_dist_of(ep)[0] for ep in eps} | set(BUILTIN_PLUGINS)
        for var, names in (("RLINF_LOAD_PLUGINS", load_only or set()), ("RLINF_BLOCK_PLUGINS", block)):
            unknown = sorted(names - known)
            if unknown:
                raise PluginError(
                    f"{var} names {', '.join(map(repr, unknown))}, which matches no installed plugin or "
                    f"distribution (installed: {', '.join(sorted(known))}); check the spelling"
                )
        for ep in sorted(eps, key=lambda e: e.name):
            dist, version = _dist_of(ep)
            if ep.name in BUILTIN_PLUGINS and dist == CORE_DISTRIBUTION:
                continue
            if ep.name in block or dist in block:
                continue
            if load_only is not None and ep.name not in load_only and dist not in load_only:
                continue
            self._add(ep.name, ep.value, dist, version, loader=ep.load)
        return self

    def _add(self, name: str, module_path: str, dist: str, version: str, loader) -> None:
        info = PluginInfo(name=name, module=module_path, distribution=dist, version=version)
        self.plugins[name] = info
        try:
            module = loader()
        except Exception as exc:  # noqa: BLE001 - any import failure becomes one clear message
            moved = moved_package_cause(exc)
            hint = moved or f"reinstall it (pip install -e <path to {dist}> or pip install {dist})"
            info.error = (
                f"plugin '{name}' from {dist} {version} failed to import: {type(exc).__name__}: {exc}. "
                f"Hint: {hint}, or skip it with RLINF_BLOCK_PLUGINS={name}"
            )
            return
        bad = _misspelled_hooks(module)
        if bad:
            info.error = f"plugin '{name}' from {dist} {version}: " + "; ".join(bad)
            return
        try:
            self.pm.register(module, name=name)
        except pluggy.PluginValidationError as exc:
            info.error = f"plugin '{name}' from {dist} {version}: {exc}"
            return
        others = [p for p in self.pm.get_plugins() if p is not module]
        hooks = [(kind, hook_name) for kind, (hook_name, _) in KINDS.items()] + [("command", "register_commands")]
        for kind, hook_name in hooks:
            # through pluggy's caller (not the raw function): it passes each implementation only the
            # arguments it names, so a plugin written before a hook gained an argument keeps working
            caller = self.pm.subset_hook_caller(hook_name, remove_plugins=others)
            if not caller.get_hookimpls():
                continue
            try:
                register = self._command_fn(info) if kind == "command" else self._register_fn(kind, info)
                caller(register=register)
            except PluginError as exc:
                info.error = str(exc)
                self._forget(info)
                self.pm.unregister(name=name)
                return
            except Exception as exc:  # noqa: BLE001
                info.error = f"plugin '{name}' from {dist} {version} failed in {hook_name}: {type(exc).__name__}: {exc}"
                self._forget(info)
                self.pm.unregister(name=name)
                return

    def _forget(self, info: PluginInfo) -> None:
        for r in info.registered:
            self.classes.pop(r.name, None)
        info.registered.clear()
        for name in [n for n, c in self.commands.items() if c.plugin == info.name]:
            del self.commands[name]

    def _command_fn(self, info: PluginInfo):
        def register(name: str, target: str, help: str) -> None:
            """Add ``rlinf NAME``: ``target`` is ``"package.module:function"``, ``help`` one line."""
            where = f"plugin '{info.name}' from {info.distribution}"
            if not isinstance(name, str) or not name or name.startswith("-") or " " in name:
                raise PluginError(f"{where} registered the command name {name!r}: expected one word")
            if name in RESERVED_COMMANDS:
                raise PluginError(f"{where} registered the command '{name}', which is one of rlinf's own commands")
            module, sep, function = str(target).partition(":")
            if not sep or not module or not function.isidentifier():
                raise PluginError(
                    f"{where} registered command '{name}' as {target!r}: expected 'package.module:function'"
                )
            previous = self.commands.get(name)
            if previous is not None:
                raise PluginError(
                    f"command '{name}' is provided by both {previous.distribution} (plugin '{previous.plugin}') "
                    f"and {info.distribution} (plugin '{info.name}'). Hint: block one with RLINF_BLOCK_PLUGINS"
                )
            self.commands[name] = Command(name, target, " ".join(str(help).split()), info.name, info.distribution)

        return register

    def _register_fn(self, kind: str, info: PluginInfo):
        def register(cls: type | str, **unsupported: Any) -> None:
            """Register a class under its class name (the ``class_path`` short name in YAML).

            Args:
                cls: the class's dotted path ``"package.module:ClassName"`` (imported only when a config
                    or command uses it, so that ``rlinf plugins`` stays fast), or the class itself.
            """
            if unsupported:
                raise PluginError(
                    f"plugin '{info.name}' from {info.distribution} passed {sorted(unsupported)} to register(): "
                    f"only register(cls) is supported (aliases were removed: YAML class_path uses the class name)"
                )
            if isinstance(cls, str):
                module, sep, qualname = cls.partition(":")
                if (
                    not sep
                    or not module
                    or not qualname
                    or not all(p.isidentifier() for p in [*module.split("."), *qualname.split(".")])
                ):
                    raise PluginError(
                        f"plugin '{info.name}' from {info.distribution} registered {cls!r} as {kind}: expected "
                        f"a class or a dotted path 'package.module:ClassName'"
                    )
                short = qualname.rsplit(".", 1)[-1]
            else:
                _check_base(cls, kind, info.name, info.distribution)
                short = cls.__name__
            previous = self.classes.get(short)
            if previous is not None and previous.class_path != Registered(kind, short, cls, "", "").class_path:
                raise PluginError(
                    f"{kind} class name '{short}' is provided by both {previous.distribution} "
                    f"(plugin '{previous.plugin}') and {info.distribution} (plugin '{info.name}'); "
                    f"short class_path names must be unique. Hint: block one with RLINF_BLOCK_PLUGINS"
                )
            entry = Registered(kind, short, cls, info.name, info.distribution)
            self.classes[short] = entry
            info.registered.append(entry)

        return register

    def import_classes(self, warn: bool = True) -> list[str]:
        """Import every registered class (LightningCLI resolves YAML short names among imported subclasses).

        A class that fails to import marks its plugin broken (as ``rlinf plugins`` shows) and is forgotten;
        returns those errors."""
        failed = []
        for entry in list(self.classes.values()):
            try:
                entry.cls
            except PluginError as exc:
                info = self.plugins[entry.plugin]
                info.error = info.error or str(exc)
                self.classes.pop(entry.name, None)
                info.registered = [r for r in info.registered if r is not entry]
                failed.append(str(exc))
                if warn:
                    print(f"rlinf: warning: {exc}", file=sys.stderr)
        return failed

    # -- queries ---------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(r.name for r in self.classes.values() if r.kind == kind)

    def resolve(self, kind: str, name: str) -> type:
        """The registered class of a short name or dotted path, or a one-line error listing the choices.

        A dotted path resolves only to a class some plugin registered (under that path, or the path its class
        reports, as LightningCLI writes it into a run's ``config.yaml``): nothing else is imported, so a name read
        from a file (a checkpoint's ``config.json``) cannot run a module's import side effects."""
        entry = self.classes.get(name)
        if entry is not None and entry.kind == kind:
            return entry.cls
        if "." in name:
            module, _, short = name.replace(":", ".").rpartition(".")
            entry = self.classes.get(short)
            if entry is not None and entry.kind == kind:
                cls = entry.cls  # imports the registered module (and so its parent packages) only
                homes = (entry.class_path.rpartition(".")[0], cls.__module__)
                # the class's own module, or a package above it that re-exports it (imported already)
                if any(home == module or home.startswith(module + ".") for home in homes):
                    if getattr(importlib.import_module(module), short, None) is cls:
                        return cls
            raise PluginError(
                f"{kind} class_path '{name}' is not a class any installed plugin registered (a dotted path is only "
                f"resolved to a registered class). Available: {', '.join(self.names(kind)) or '(none)'}."
            )
        raise PluginError(self.unknown_message(kind, name))

    def unknown_message(self, kind: str, name: str) -> str:
        names = self.names(kind)
        close = difflib.get_close_matches(name, names, n=1)
        msg = f"unknown {kind} class_path '{name}'. Available: {', '.join(names) or '(none)'}."
        if close:
            msg += f" Did you mean '{close[0]}'?"
        hint = _install_hint(name)
        broken = [p for p in self.plugins.values() if p.error]
        if hint:
            msg += f" Hint: {hint}"
        if broken:
            msg += " Plugins that failed to load: " + ", ".join(f"{p.name} ({p.distribution})" for p in broken)
            msg += " — fix or reinstall it (`rlinf plugins` shows why it failed)."
        return msg

    def errors(self) -> list[str]:
        return [p.error for p in self.plugins.values() if p.error]


# Known classes of first-party plugins, so a missing plugin gives an install hint.
KNOWN_PROVIDERS = {
    "LiberoEnv": "rlinf-env-libero",
    "ManiSkillEnv": "rlinf-env-maniskill",
    "MetaWorldEnv": "rlinf-env-metaworld",
    "OpenVLAPolicy": "rlinf-policy-openvla",
    "OpenVLAOFTPolicy": "rlinf-policy-openvla",
    "OpenPIPolicy": "rlinf-policy-openpi",
    "OpenSoraWorldModel": "rlinf-wm-opensora",
    "WanWorldModel": "rlinf-wm-wan",
}


def _install_hint(name: str) -> str | None:
    dist = KNOWN_PROVIDERS.get(name)
    if dist is None:
        return None
    return f"'{name}' is provided by {dist}: pip install -e plugins/{dist} (or pip install {dist})."


def _misspelled_hooks(module: ModuleType) -> list[str]:
    problems = []
    for attr in dir(module):
        obj = getattr(module, attr)
        if not callable(obj) or not hasattr(obj, f"{hookspecs.PROJECT}_impl"):
            continue
        if attr not in hookspecs.HOOK_NAMES:
            close = difflib.get_close_matches(attr, hookspecs.HOOK_NAMES, n=1)
            suggestion = f" Did you mean '{close[0]}'?" if close else ""
            problems.append(f"unknown hook '{attr}' (known: {', '.join(hookspecs.HOOK_NAMES)}).{suggestion}")
    return problems


def _core_version() -> str:
    try:
        return version(CORE_DISTRIBUTION)
    except Exception:  # noqa: BLE001 - running from a source tree
        return "0+unknown"


_REGISTRY: Registry | None = None


def load_plugins(reload: bool = False, warn: bool = True) -> Registry:
    """Load every plugin once per process and return the registry."""
    global _REGISTRY
    if _REGISTRY is None or reload:
        _REGISTRY = Registry().load()
        if warn:
            for err in _REGISTRY.errors():
                print(f"rlinf: warning: {err}", file=sys.stderr)
    return _REGISTRY


def get_registry() -> Registry:
    return load_plugins()
