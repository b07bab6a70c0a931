"""What a constructor accepts, as jsonargparse reads it."""

from __future__ import annotations

import inspect


def constructor_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named ``__init__`` parameters of ``cls``, following ``**kwargs`` into the parent's ``__init__`` (a
    constructor that forwards ``**kwargs`` to ``super().__init__`` accepts the parent's arguments too)."""
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in out:
                out[p.name] = p
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return out
