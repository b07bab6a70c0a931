"""What a constructor accepts, as jsonargparse reads it."""

from __future__ import annotations

import inspect
import typing


def constructor_parameters(cls: type, resolve_annotations: bool = False) -> dict[str, inspect.Parameter]:
    """The named ``__init__`` parameters of ``cls``, following ``**kwargs`` into the parent's ``__init__`` (a
    constructor that forwards ``**kwargs`` to ``super().__init__`` accepts the parent's arguments too).

    Args:
        cls: the class whose constructor is read.
        resolve_annotations: give each parameter its evaluated type hint (string annotations resolved); the
            search stops at the first constructor whose hints do not resolve.
    """
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = list(inspect.signature(init).parameters.values())[1:]
            hints = typing.get_type_hints(init) if resolve_annotations else {}
        except Exception:  # noqa: BLE001 - unannotated or unresolvable: nothing more to read
            if not resolve_annotations:
                raise
            return out
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in out:
                out[p.name] = p.replace(annotation=hints[p.name]) if p.name in hints else p
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return out
