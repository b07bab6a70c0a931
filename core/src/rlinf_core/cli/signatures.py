"""Values the parsed config gives that its classes' signatures cannot take: ``null`` for a required number, a
non-finite float where an rlinf class's default is finite (by key path, before anything is built)."""

from __future__ import annotations

import importlib
import inspect
import math
import typing
from typing import Any

from rlinf_core.foundation.signatures import constructor_parameters


def import_config_class(class_path: str) -> type | None:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - jsonargparse already reported unknown classes
        return None


def _allows(annotation: Any, kind: type) -> tuple[bool, bool]:
    """(``annotation`` admits ``kind``, it admits ``None``)."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) is not None else (annotation,)
    return any(a is kind for a in args), any(a is type(None) for a in args) or annotation is Any


def check_signature_values(node: Any, path: str = "") -> None:
    """``null`` for a required number and non-finite floats where the class's default is finite, by key path."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            check_signature_values(item, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    cls = import_config_class(node["class_path"]) if isinstance(node.get("class_path"), str) else None
    args = node.get("init_args") if isinstance(node.get("init_args"), dict) else {}
    params = constructor_parameters(cls, resolve_annotations=True) if cls is not None else {}
    for key, value in args.items():
        p = params.get(key)
        where = f"{path}.init_args.{key}" if path else f"init_args.{key}"
        if p is not None and p.annotation is not inspect.Parameter.empty:
            numeric = [k for k in (int, float) if _allows(p.annotation, k)[0]]
            nullable = _allows(p.annotation, int)[1]
            if value is None and numeric and not nullable and p.default is not None:
                raise ValueError(
                    f"{where}: null given, expected {' or '.join(k.__name__ for k in numeric)} (default {p.default!r})"
                    if p.default is not p.empty
                    else f"{where}: null given, a required {numeric[0].__name__}"
                )
            # only rlinf's own classes: a third-party class may take inf as a meaningful value
            default_finite = cls.__module__.startswith("rlinf") and not (
                isinstance(p.default, float) and not math.isfinite(p.default)
            )
            if isinstance(value, float) and not math.isfinite(value) and float in numeric and default_finite:
                raise ValueError(f"{where}: {value} given, expected a finite number")
    for key, value in node.items():
        if key != "init_args":
            check_signature_values(value, f"{path}.{key}" if path else key)
    for key, value in args.items():
        check_signature_values(value, f"{path}.init_args.{key}" if path else key)
