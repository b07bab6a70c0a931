"""A model's settings, recorded with its checkpoint: :class:`SavedSettings` captures the constructor arguments a
model is built with (as diffusers' ``register_to_config`` does), ``save_pretrained`` writes them into the
checkpoint's ``config.json`` under :data:`SETTINGS_KEY`, and every build on that directory (a YAML ``model_path``,
``from_pretrained``, ``rlinf serve``, ``rlinf validate``) starts from them.

Config groups (``actions:``, ``noise:``, ...) are constructor arguments whose default is a dataclass instance; they
are recorded and restored field by field, and may be given as the dataclass or as a dict of some of its fields.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar

from rlinf_core.foundation.signatures import constructor_parameters

#: the ``config.json`` entry where ``save_pretrained`` records the settings (policies, world models)
SETTINGS_KEY = "rlinf"
#: where OpenVLA / OFT directories saved before the settings had one key hold them (still read)
EARLIER_SETTINGS_KEYS = ("rlinf_policy",)
#: the entry of the record naming the class that wrote it (``rlinf serve`` builds that class); ``policy`` in
#: directories saved before world models recorded their settings too
CLASS_ENTRY = "class"
EARLIER_CLASS_ENTRIES = ("policy",)

# names (and (group, field) pairs) given to from_pretrained: they win over the record even when equal to a default
_GIVEN: contextvars.ContextVar[frozenset] = contextvars.ContextVar("rlinf_settings_given", default=frozenset())


def grouped_settings(settings: dict[str, Any], groups: dict[str, type], flat_keys: dict[str, tuple[str, str]]) -> dict:
    """Constructor arguments with each config group as a dict of the fields given: a group may be given as a dict
    or as its dataclass; ``flat_keys`` maps a flat name (RLinf's YAML key) to its (group, field), and a flat name
    wins over the same field in the group. Other settings pass through."""
    out = {k: v for k, v in settings.items() if k not in flat_keys or k in groups}
    for flat, (group, field) in flat_keys.items():
        if flat in settings and group in groups:
            given = out.get(group)
            values = asdict(given) if is_dataclass(given) else dict(given or {})
            out[group] = {**values, field: settings[flat]}
    return out


def read_record(config_path: str | Path) -> dict[str, Any]:
    """The settings recorded in a ``config.json`` (the writer's class name included), ``{}`` when none are."""
    try:
        raw = json.loads(Path(config_path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return next((raw[k] for k in (SETTINGS_KEY, *EARLIER_SETTINGS_KEYS) if isinstance(raw.get(k), dict)), {})


def writer_class(record: dict[str, Any]) -> str | None:
    """The class name a settings record names, if any."""
    name = next((record[k] for k in (CLASS_ENTRY, *EARLIER_CLASS_ENTRIES) if k in record), None)
    return name if isinstance(name, str) else None


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it (tuples as lists, dataclasses as dicts), for comparisons and the record."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal values (``5 == 5.0``, ``(1, 2) == [1, 2]``), a bool never equal to a number."""
    a, b = _plain(a), _plain(b)
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def config_groups(cls: type) -> dict[str, type]:
    """The constructor's config groups: name → dataclass, for every parameter whose default is a dataclass."""
    return {
        name: type(p.default)
        for name, p in constructor_parameters(cls).items()
        if is_dataclass(p.default) and not isinstance(p.default, type)
    }


class SavedSettings:
    """The constructor arguments of a model, recorded with its checkpoint and restored from it, one way for every
    model (in the spirit of diffusers' ``register_to_config`` and huggingface_hub's ``ModelHubMixin``).

    A subclass writes a plain typed ``__init__`` with real defaults; nothing else is needed:

    - the arguments it is built with are captured (:meth:`settings_record`), except :attr:`NOT_RECORDED` (where the
      weights are and how this run holds them); ``save_pretrained`` writes :meth:`settings_record` into its
      ``config.json`` under :data:`SETTINGS_KEY`;
    - built on a directory (its :attr:`SETTINGS_FROM` argument, ``model_path``) whose settings this class (or a
      base class) recorded, an argument left at its default takes the recorded value; any other value wins. A
      config group is restored field by field;
    - :meth:`from_pretrained` builds the model on a directory with overrides, which always win (also a value equal
      to the default, which the constructor cannot tell from one left out: YAML passes every default).

    A constructor argument whose default is ``None`` because the value is read from the checkpoint's files (its
    tensors, its statistics) rather than chosen may call :meth:`record_settings` with the value it resolved, so a
    reload does not resolve it again. A subclass that adds arguments forwards the rest to ``super().__init__``;
    only the outermost constructor restores and records.
    """

    #: constructor arguments that are not recorded: where the weights come from and how this run holds them
    NOT_RECORDED: ClassVar[tuple[str, ...]] = ("model_path", "lora", "precision", "gradient_checkpointing")
    #: the constructor argument naming the directory (or file) the recorded settings are read from
    SETTINGS_FROM: ClassVar[str] = "model_path"
    #: flat setting names → ``(config group, field)``, accepted by :meth:`from_pretrained` (RLinf's YAML names)
    FLAT_SETTINGS: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_restores_settings", False):
            cls.__init__ = _restoring(init)

    @classmethod
    def settings_file(cls, location: str | Path) -> Path:
        """Where the settings of a checkpoint at ``location`` (the :attr:`SETTINGS_FROM` argument) are recorded."""
        return Path(location) / "config.json"

    @classmethod
    def recorded_settings(cls, location: str | Path) -> dict[str, Any]:
        """The constructor settings recorded for ``location`` (groups as dicts); ``{}`` when none are, or when
        another class recorded them (OFT's settings do not describe an OpenVLAPolicy built on the same weights;
        a subclass does take its base class's)."""
        record = read_record(cls.settings_file(location))
        writer = writer_class(record)
        if writer is not None and writer not in {klass.__name__ for klass in cls.__mro__}:
            return {}
        return {k: v for k, v in record.items() if k not in (CLASS_ENTRY, *EARLIER_CLASS_ENTRIES)}

    def record_settings(self, **values: Any) -> None:
        """Record values resolved from the checkpoint's files in place of the arguments given (a group's fields as
        a dict: ``record_settings(inputs={"image_resize": "pil"})``)."""
        record = self.__dict__.setdefault("_recorded_settings", {})
        for name, value in values.items():
            if isinstance(value, dict) and isinstance(record.get(name), dict):
                record[name] = {**record[name], **_plain(value)}
            else:
                record[name] = _plain(value)

    def settings_record(self) -> dict[str, Any]:
        """What ``save_pretrained`` writes under :data:`SETTINGS_KEY`: the class name (``rlinf serve`` builds it)
        and the constructor settings (groups as dicts)."""
        return {CLASS_ENTRY: type(self).__name__, **self.__dict__.get("_recorded_settings", {})}

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any):
        """Build the model on ``path``; ``overrides`` are constructor arguments, groups (a dict of some fields or
        the dataclass) or their flat names (``actions={"unnorm_key": ...}`` or ``unnorm_key=...``). They win over
        the recorded settings, which fill in the rest (a group object's fields left at their defaults included)."""
        args = grouped_settings(overrides, config_groups(cls), cls.FLAT_SETTINGS)
        given = set(args)  # a group's fields: those of a dict; a group object's that differ from the default
        given.update((name, f) for name, value in args.items() if isinstance(value, dict) for f in value)
        token = _GIVEN.set(frozenset(given))
        try:
            return cls(**{cls.SETTINGS_FROM: str(path)}, **args)
        finally:
            _GIVEN.reset(token)


def _restored(cls: type, bound: dict[str, Any], given: frozenset) -> tuple[dict[str, Any], dict[str, Any]]:
    """The constructor arguments (every parameter, groups as dataclasses) and the record of them."""
    params = constructor_parameters(cls)
    location = bound.get(cls.SETTINGS_FROM, params.get(cls.SETTINGS_FROM, inspect.Parameter.empty))
    saved = cls.recorded_settings(location) if isinstance(location, (str, Path)) else {}
    args: dict[str, Any] = {}
    record: dict[str, Any] = {}
    for name, p in params.items():
        if name not in bound and p.default is inspect.Parameter.empty:
            continue  # a required argument left out: the constructor's own TypeError says so
        value = bound.get(name, p.default)
        default = p.default
        if is_dataclass(default) and not isinstance(default, type):  # a config group, restored field by field
            group = type(default)
            if isinstance(value, dict):
                value = group(**{**asdict(default), **value})
            elif value is None:
                value = default
            if isinstance(value, group):
                recorded = saved.get(name) if isinstance(saved.get(name), dict) else {}
                changes = {
                    f.name: recorded[f.name]
                    for f in fields(group)
                    if f.name in recorded
                    and (name, f.name) not in given
                    and _same(getattr(value, f.name), getattr(default, f.name))
                }
                if changes:
                    value = group(**{**asdict(value), **changes})
        elif name in saved and name not in given and _same(value, default) and name not in cls.NOT_RECORDED:
            value = saved[name]
        args[name] = value
        if name not in cls.NOT_RECORDED:
            record[name] = _plain(value)
    return args, record


def _restoring(init):
    """``init`` wrapped to restore and record the settings when it is the constructor of the instance's class."""

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if type(self).__init__ is not __init__:  # a subclass's constructor forwarding: it restored already
            init(self, *args, **kwargs)
            return
        names = list(constructor_parameters(type(self)))
        if len(args) > len(names):
            init(self, *args, **kwargs)  # too many positional arguments: the constructor's own TypeError
            return
        bound = {**dict(zip(names, args)), **kwargs}
        given = _GIVEN.get()
        token = _GIVEN.set(frozenset())  # a model built inside this one restores its own settings
        try:
            call, record = _restored(type(self), bound, given)
            extra = {k: v for k, v in bound.items() if k not in call}  # unknown names: the constructor refuses them
            object.__setattr__(self, "_recorded_settings", record)
            init(self, **call, **extra)
        finally:
            _GIVEN.reset(token)

    __init__._restores_settings = True
    return __init__
