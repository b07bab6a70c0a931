"""Parse-time checks of config values against their allowed ranges (one-line ``ValueError`` each).

Called from the ``__init__`` / ``__post_init__`` of the config classes, so a bad value fails while jsonargparse
builds the run, before anything is written. The error is a :class:`ConfigValueError` that names the value as the class
knows it (``update_epoch``, ``optim.lr``); ``rlinf fit`` renames it to its YAML key
(``model.init_args.algorithm.init_args.update_epoch``) and :mod:`rlinf_core.cli.error_report` prints the message as
the one-line cause.
"""

from __future__ import annotations

import math
import re
from typing import Any


class ConfigValueError(ValueError):
    """A config value (or values that must agree) that a class refuses, with the names its message gives them.

    Args:
        message: one line naming every key of ``values`` as written there.
        values: ``{key: value}`` of the refused settings; a key is the parameter as the class knows it, with its
            section where that helps a reader (``update_epoch``, ``optim.lr``, ``policy.action_dim``).
    """

    def __init__(self, message: str, values: dict[str, Any]) -> None:
        super().__init__(message)
        self.values = dict(values)

    def rename(self, names: dict[str, str]) -> None:
        """Name the keys as ``names`` says (``rlinf fit``: by their YAML keys), in the message too."""
        message = str(self)
        for key, name in names.items():
            message = re.sub(rf"(?<![\w.]){re.escape(key)}(?![\w])", lambda _: name, message)
        self.args = (message,)
        self.values = {names.get(key, key): value for key, value in self.values.items()}


def _allowed(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """``>= 1``, ``> 0``, ``<= 1`` or ``in [0, 1)`` (empty without bounds)."""
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    return ""


def check_number(
    name: str,
    value: float | int | None,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    hint: str = "",
) -> None:
    """Raise :class:`ConfigValueError` unless ``value`` is a finite number in ``[low, high]`` (``(`` / ``)`` when open).

    Args:
        name: the config key, as the class knows it (``optim.lr``, ``update_epoch``).
        value: the value given.
        low: smallest allowed value (``None``: unbounded).
        high: largest allowed value (``None``: unbounded).
        low_open: ``low`` itself is not allowed.
        high_open: ``high`` itself is not allowed.
        optional: ``None`` is allowed.
        hint: appended to the message (what the value means, what to use).
    """
    if value is None and optional:
        return
    allowed = _allowed(low, high, low_open, high_open)
    tail = f" ({hint})" if hint else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        rule = f"a finite number {allowed}" if allowed else "a finite number"
        raise ConfigValueError(f"{name} must be {rule}, got {value!r}{tail}", {name: value})
    if (low is not None and (value < low or (low_open and value == low))) or (
        high is not None and (value > high or (high_open and value == high))
    ):
        raise ConfigValueError(f"{name} must be {allowed}, got {value!r}{tail}", {name: value})


def check_choice(name: str, value: object, choices: tuple | list) -> None:
    """Raise :class:`ConfigValueError` unless ``value`` is one of ``choices`` (``name``: the config key,
    ``reward.mode``)."""
    if value not in choices:
        raise ConfigValueError(f"{name} must be one of {list(choices)}, got {value!r}", {name: value})
