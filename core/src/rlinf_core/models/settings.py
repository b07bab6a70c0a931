"""A policy's settings: typed config groups (``actions:``, ``noise:``, ...) from any mix of group dicts, group
objects and flat names (RLinf's YAML keys, directories saved before the groups existed), and
:class:`SavedSettings`, the one way policies record them in a checkpoint and restore them."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar


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


SAVED_SETTINGS_KEYS = ("rlinf", "rlinf_policy")  #: config.json entries where save_pretrained records the settings


class SavedSettings:
    """Save and restore a policy's constructor settings with its checkpoint, one way for every policy (in the
    spirit of transformers' ``PretrainedConfig`` / huggingface_hub's ``ModelHubMixin``).

    ``save_pretrained`` records :meth:`settings` in ``config.json`` under :attr:`SETTINGS_KEY`; the constructor
    calls :meth:`restore_settings` with what it was given, so every route that builds the policy on a directory (a
    YAML ``model_path``, :meth:`from_pretrained`, ``rlinf serve --policy``, ``rlinf validate``) gets the same
    policy: a setting given (not None) wins, else the recorded one, else the constructor's default.

    Subclasses set :attr:`SETTINGS_GROUPS` (YAML group → dataclass) and :attr:`FLAT_SETTINGS` (RLinf's flat names
    and older directories' → (group, field)), give ``None`` as the constructor default of every restorable
    setting, and implement :meth:`settings`.
    """

    SETTINGS_KEY: ClassVar[str] = "rlinf"
    SETTINGS_GROUPS: ClassVar[dict[str, type]] = {}
    FLAT_SETTINGS: ClassVar[dict[str, tuple[str, str]]] = {}

    def settings(self) -> dict[str, Any]:
        """The constructor settings to record (groups as dicts; runtime ones such as LoRA and precision left out)."""
        raise NotImplementedError(f"{type(self).__name__}.settings() must return the settings to record")

    def settings_record(self) -> dict[str, Any]:
        """What ``config.json`` holds under :attr:`SETTINGS_KEY`: the class name (``rlinf serve`` reads it) and
        :meth:`settings`."""
        return {"policy": type(self).__name__, **self.settings()}

    @classmethod
    def saved_settings(cls, model_path: str | Path) -> dict[str, Any]:
        """The settings recorded in ``model_path/config.json`` (flat names of older directories put into their
        groups, groups as dicts); ``{}`` when none are recorded."""
        try:
            raw = json.loads((Path(model_path) / "config.json").read_text())
        except (OSError, ValueError):
            return {}
        found = next(
            (raw[k] for k in SAVED_SETTINGS_KEYS if isinstance(raw, dict) and isinstance(raw.get(k), dict)), {}
        )
        out = {k: v for k, v in found.items() if k != "policy" and k not in cls.FLAT_SETTINGS}
        for group in cls.SETTINGS_GROUPS:
            values = dict(out.get(group) or {})
            values.update({f: found[k] for k, (g, f) in cls.FLAT_SETTINGS.items() if g == group and k in found})
            if values:
                out[group] = values
        return out

    @classmethod
    def restore_settings(cls, model_path: str | Path, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` (constructor arguments, None = not given) completed from the recorded settings: a scalar given
        wins, else the recorded one; a group (dataclass or dict) is built from the recorded fields overlaid with
        the given fields that are not None."""
        saved = cls.saved_settings(model_path)
        out: dict[str, Any] = {}
        for name, value in given.items():
            group = cls.SETTINGS_GROUPS.get(name)
            if group is None:
                out[name] = value if value is not None else saved.get(name)
                continue
            known = {f.name for f in fields(group)}
            values = {f: v for f, v in (saved.get(name) or {}).items() if f in known}
            set_here = asdict(value) if is_dataclass(value) else dict(value or {})
            values.update({f: v for f, v in set_here.items() if v is not None})
            out[name] = group(**values)
        return out

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any):
        """Build the policy on ``path``; ``overrides`` are constructor arguments, groups or their flat names
        (``actions={"unnorm_key": ...}`` or ``unnorm_key=...``). The recorded settings fill in the rest."""
        return cls(model_path=str(path), **grouped_settings(overrides, cls.SETTINGS_GROUPS, cls.FLAT_SETTINGS))
