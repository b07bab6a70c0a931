"""Parse-time checks of config values against their allowed ranges (one-line ``ValueError`` each).

Called from the ``__init__`` / ``__post_init__`` of the config classes, so a bad value fails while jsonargparse
builds the run, before anything is written; :mod:`rlinf_core.cli.error_report` prints the message as the one-line cause.
"""

from __future__ import annotations

import math


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
    """Raise ``ValueError`` unless ``value`` is a finite number in ``[low, high]`` (``(`` / ``)`` when open).

    Args:
        name: the config key, as the user writes it (``optim.lr``).
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
    lo = "(" if low_open else "["
    hi = ")" if high_open else "]"
    allowed = f"{lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"
    tail = f" ({hint})" if hint else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number in {allowed}, got {value!r}{tail}")
    if (low is not None and (value < low or (low_open and value == low))) or (
        high is not None and (value > high or (high_open and value == high))
    ):
        raise ValueError(f"{name} must be in {allowed}, got {value!r}{tail}")


def check_choice(name: str, value: object, choices: tuple | list) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices`` (``name``: the config key, ``reward.mode``)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
