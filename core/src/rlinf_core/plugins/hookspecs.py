"""The whole plugin contract of rlinf: three registration hooks.

A plugin is a module named by an entry point in the ``rlinf`` group. It implements any of the
hooks below with ``@rlinf_core.hookimpl``; each hook receives a host-owned ``register`` callable::

    from rlinf_core import hookimpl

    @hookimpl
    def register_envs(register):
        from .env import MyEnv
        register(MyEnv)

``register(cls)`` checks the base class, rejects a short name that another plugin already
registered (naming both distributions) and records which plugin registered it. After
registration, ``class_path: MyEnv`` works in YAML configs.

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
    """Register :class:`rlinf_core.Env` subclasses: ``register(MyEnv)``."""


@hookspec
def register_policies(register) -> None:
    """Register :class:`rlinf_core.Policy` subclasses: ``register(MyPolicy)``."""


@hookspec
def register_world_models(register) -> None:
    """Register :class:`rlinf_core.WorldModel` (and reward model) subclasses: ``register(MyWorldModel)``."""


HOOK_NAMES = ("register_envs", "register_policies", "register_world_models")
