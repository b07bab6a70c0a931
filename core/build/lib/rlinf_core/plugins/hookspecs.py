"""The whole plugin contract of rlinf: four registration hooks.

A plugin is a module named by an entry point in the ``rlinf`` group. It implements any of the
hooks below with ``@rlinf_core.hookimpl``; each hook receives a host-owned ``register`` callable::

    from rlinf_core import hookimpl

    @hookimpl
    def register_envs(register):
        register("my_plugin.env:MyEnv")

    @hookimpl
    def register_commands(register):
        register("my-tool", "my_plugin.tool:main", "one line: what `rlinf my-tool` does")

``register("package.module:ClassName")`` records the class by its dotted path without importing it, so
``rlinf --help`` / ``plugins`` / ``configs`` never import a plugin's heavy dependencies; the class is
imported (and its base class checked) when a config or command uses it. ``register(MyEnv)`` (the class
itself) works too. A short name that another plugin already registered is rejected (naming both
distributions). After registration, ``class_path: MyEnv`` works in YAML configs.

Hooks are called through pluggy, which passes an implementation only the arguments it names: when
a hook gains an argument, plugins written against the older signature keep working.
"""

from __future__ import annotations

import pluggy

PROJECT = "rlinf"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_envs(register) -> None:
    """Register :class:`rlinf_core.Env` subclasses: ``register("my_plugin.env:MyEnv")``."""


@hookspec
def register_policies(register) -> None:
    """Register :class:`rlinf_core.Policy` subclasses: ``register("my_plugin.policy:MyPolicy")``."""


@hookspec
def register_world_models(register) -> None:
    """Register :class:`rlinf_core.WorldModel` (and reward model) subclasses:
    ``register("my_plugin.world_model:MyWorldModel")``."""


@hookspec
def register_commands(register) -> None:
    """Add ``rlinf <name>`` commands: ``register(name, "package.module:function", "one-line description")``.

    The function is imported only when the command runs; it gets the remaining arguments (``list[str]``) and
    returns an exit status (``None``: 0). Names of rlinf's own commands cannot be taken."""


HOOK_NAMES = ("register_envs", "register_policies", "register_world_models", "register_commands")
