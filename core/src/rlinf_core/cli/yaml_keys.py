"""The YAML key of a value a class refused: a class names the value as it knows it (``update_epoch``, ``optim.lr``,
``policy.action_dim``, :class:`rlinf_core.foundation.checks.ConfigValueError`); ``rlinf fit`` names where the config
sets it (``model.init_args.algorithm.init_args.update_epoch``)."""

from __future__ import annotations

import math
from typing import Any


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare (arrays) are not the same
        return False


def _leaves(node: Any, yaml: tuple[str, ...] = (), logical: tuple[str, ...] = ()):
    """``(YAML key parts, parts without init_args, value)`` of every key in a parsed config."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        key = str(key)
        here = (*yaml, key)
        named = logical if key == "init_args" else (*logical, key)
        if key != "init_args":
            yield here, named, value
        yield from _leaves(value, here, named)


def _names(parts: tuple[str, ...], key: str) -> bool:
    """``key`` (``policy.action_dim``) names the config key ``parts`` (``model, policy, actions, action_dim``): the
    same last part, the others in order among the ones before it."""
    *sections, last = key.split(".")
    if not parts or parts[-1] != last:
        return False
    rest = iter(parts[:-1])
    return all(section in rest for section in sections)


def yaml_key(config: dict, key: str, value: Any) -> str | None:
    """The YAML key in ``config`` (a parsed config as a dict) that ``key`` names: the one such key, else the one of
    those that holds ``value``; ``None`` when there is none or it is ambiguous."""
    found = [(parts, held) for parts, named, held in _leaves(config) if _names(named, key)]
    if len(found) > 1:
        found = [(parts, held) for parts, held in found if _same(held, value)]
    return ".".join(found[0][0]) if len(found) == 1 else None


def yaml_keys(config: dict, values: dict[str, Any]) -> dict[str, str]:
    """``{key: YAML key}`` for every key of ``values`` that names one key of ``config``."""
    out = {}
    for key, value in values.items():
        where = yaml_key(config, key, value)
        if where is not None and where != key:
            out[key] = where
    return out
