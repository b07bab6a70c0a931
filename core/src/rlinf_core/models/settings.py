"""A policy's settings as typed config groups (``actions:``, ``noise:``, ...) from any mix of group dicts, group
objects and flat names (RLinf's YAML keys, directories saved before the groups existed)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any


def grouped_settings(settings: dict[str, Any], groups: dict[str, type], flat_keys: dict[str, tuple[str, str]]) -> dict:
    """Constructor arguments with one dataclass per group in ``groups`` (name → dataclass). A group may be given as
    a dict or as its dataclass; ``flat_keys`` maps a flat name to its (group, field), and a flat name wins over the
    same field in the group. Other settings pass through."""
    out = {k: v for k, v in settings.items() if k not in flat_keys and k not in groups}
    for group, cls in groups.items():
        given = settings.get(group)
        values = asdict(given) if isinstance(given, cls) else dict(given or {})
        values.update({f: settings[k] for k, (g, f) in flat_keys.items() if g == group and k in settings})
        if values or group in settings:
            out[group] = cls(**values)
    return out
