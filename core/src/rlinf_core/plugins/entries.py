"""What plugins register: classes by dotted path (imported on first use) and ``rlinf`` commands."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KINDS", "RESERVED_COMMANDS", "Command", "PluginError", "Registered", "moved_package_cause"]

# kind -> (hook name, dotted path of the base class)
KINDS = {
    "env": ("register_envs", "rlinf_core.contracts.env:Env"),
    "policy": ("register_policies", "rlinf_core.contracts.policy:Policy"),
    "world_model": ("register_world_models", "rlinf_core.contracts.world_model:WorldModel,RewardModel"),
}


class PluginError(RuntimeError):
    """A plugin could not be loaded or registered something invalid."""


def moved_package_cause(exc: BaseException) -> str | None:
    """The cause, in one sentence, when ``exc`` comes from code written for the core's old import name ``rlinf``
    (now ``rlinf_core``): ``No module named 'rlinf'`` / ``'rlinf.envs.base'``, or, beside upstream RLinf's own
    ``rlinf`` package, a name that package lacks. ``None`` for any other failure."""
    if isinstance(exc, ModuleNotFoundError):
        name = exc.name or ""
    elif isinstance(exc, ImportError):  # `from rlinf import hookimpl` with upstream RLinf installed
        name = exc.name if (exc.name or "").split(".")[0] == "rlinf" and "cannot import name" in str(exc) else ""
    else:
        return None
    if name.split(".")[0] != "rlinf":
        return None
    return (
        "it imports the package `rlinf`, which is now `rlinf_core`: change "
        '`import rlinf...` / `from rlinf...` to `rlinf_core...`; docs/plugin_migration.md, "Migrating from `rlinf`", '
        "maps every old module to its new place"
    )


@dataclass
class Command:
    """A ``rlinf <name>`` command a plugin added (``register_commands``); ``target`` is ``module:function``."""

    name: str
    target: str
    help: str
    plugin: str
    distribution: str

    def load(self):
        module, _, function = self.target.partition(":")
        try:
            return getattr(importlib.import_module(module), function)
        except Exception as exc:  # noqa: BLE001 - one clear line
            raise PluginError(
                f"command '{self.name}' of plugin '{self.plugin}' ({self.distribution}) failed to import "
                f"'{self.target}': {type(exc).__name__}: {exc}"
            ) from None


#: names of rlinf's own commands: a plugin cannot register these
#: every name in ``rlinf_core.cli.commands.BUILTIN_COMMANDS`` and ``help`` (tests/core/test_cli_front_door.py)
RESERVED_COMMANDS = frozenset(
    {"fit", "validate", "test", "predict", "plugins", "configs", "plot", "memory", "coevolve", "wm-score", "serve"}
    | {"help", "new"}
)


@dataclass
class Registered:
    """One registered class: a short name and where the class lives, imported on first use."""

    kind: str
    name: str
    target: str | type  # "package.module:QualName", or the class itself (plugins that import it eagerly)
    plugin: str
    distribution: str
    _cls: type | None = field(default=None, repr=False)

    @property
    def class_path(self) -> str:
        if isinstance(self.target, type):
            return f"{self.target.__module__}.{self.target.__qualname__}"
        return self.target.replace(":", ".")

    @property
    def loaded(self) -> bool:
        return self._cls is not None or isinstance(self.target, type)

    @property
    def cls(self) -> type:
        """The class (imported now if it was registered by its dotted path); one-line :class:`PluginError`
        if it cannot be imported or has the wrong base class."""
        if self._cls is None:
            if isinstance(self.target, type):
                cls = self.target
            else:
                module, _, qualname = self.target.partition(":")
                try:
                    cls = importlib.import_module(module)
                    for part in qualname.split("."):
                        cls = getattr(cls, part)
                except Exception as exc:  # noqa: BLE001 - any import failure becomes one clear message
                    moved = moved_package_cause(exc)
                    hint = f"Hint: {moved}" if moved else f"Hint: reinstall {self.distribution}"
                    raise PluginError(
                        f"plugin '{self.plugin}' from {self.distribution} registered {self.kind} '{self.name}' as "
                        f"'{self.target}', which failed to import: {type(exc).__name__}: {exc}. {hint}, or skip it "
                        f"with RLINF_BLOCK_PLUGINS={self.plugin}"
                    ) from None
            _check_base(cls, self.kind, self.plugin, self.distribution)
            self._cls = cls
        return self._cls


def _check_base(cls: Any, kind: str, plugin: str, distribution: str) -> None:
    base = _load_base(kind)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(
            f"plugin '{plugin}' from {distribution} registered {cls!r} as {kind}, "
            f"but it is not a subclass of {' or '.join(b.__module__ + '.' + b.__qualname__ for b in base)}"
        )


def _load_base(kind: str) -> tuple[type, ...]:
    module, qualnames = KINDS[kind][1].split(":")
    mod = importlib.import_module(module)
    return tuple(getattr(mod, q) for q in qualnames.split(","))
