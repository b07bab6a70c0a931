"""rlinf uses Lightning through its public API: no private attribute of a Lightning object is read or written and no
private Lightning method is overridden, except where Lightning has no public hook (listed in ``ALLOWED`` with the
reason, each covered by a behaviour test).

"Private" here means a ``_name`` (not dunder) that Lightning's own classes define (``self._name = ...`` or
``def _name``). Checked: every ``obj._name`` in the core and the plugins where ``obj`` is not ``self`` / ``cls``,
and every ``self._name`` / ``def _name`` inside a class whose bases include a Lightning class.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import lightning.pytorch as pl

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]

# (file relative to its src root, private name): why no public hook exists, and the test that covers it
ALLOWED = {
    # ModelParallelStrategy turns data_parallel_size "auto" into the number of nodes and has no public setter
    # once the world size is known; data parallelism over every rank (tests/scale/test_strategies_multiprocess.py)
    ("rlinf_core/distributed/strategies.py", "_data_parallel_size"),
    # ModelCheckpoint replaces last.ckpt by removing the old link before making the new one (a kill in between
    # leaves none); the override renames a new link over it (tests/core/test_checkpoints.py)
    ("rlinf_core/run/checkpointing.py", "_link_checkpoint"),
}


def _lightning_private_names() -> set[str]:
    root = Path(pl.__file__).parent
    names: set[str] = set()
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=\n]+)?=", text))
        names.update(re.findall(r"def (_[a-z]\w*)\(self", text))
    return names


def _sources() -> list[tuple[str, Path]]:
    return [(p.relative_to(src).as_posix(), p) for src in SOURCE_ROOTS for p in sorted(src.rglob("*.py"))]


def _own_private_names(trees: dict[str, ast.AST]) -> set[str]:
    """Private names our own code defines (assigned on self or declared as methods or fields)."""
    own: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("_"):
                own.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and t.attr.startswith("_"):
                        own.add(t.attr)
                    elif isinstance(t, ast.Name) and t.id.startswith("_"):
                        own.add(t.id)
    return own


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _lightning_bases(module_name: str, class_name: str) -> list[type]:
    cls = getattr(importlib.import_module(module_name), class_name)
    return [b for b in inspect.getmro(cls)[1:] if b.__module__.startswith("lightning")]


def _names_defined_by(bases: list[type]) -> set[str]:
    names: set[str] = set()
    for base in bases:
        try:
            text = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        names.update(re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=\n]+)?=", text))
        names.update(re.findall(r"def (_[a-z]\w*)\(self", text))
        names.update(n for n in vars(base) if _is_private(n))
    return names


def test_no_private_lightning_attribute_or_override() -> None:
    lightning_private = _lightning_private_names()
    assert {"_trainer", "_data_parallel_size", "_instantiate_trainer"} <= lightning_private  # the scan works
    trees = {rel: ast.parse(path.read_text(encoding="utf-8")) for rel, path in _sources()}
    own = _own_private_names(trees)
    found: list[str] = []

    for rel, tree in trees.items():
        # obj._name on another object: a Lightning private name that our code never defines itself
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr in lightning_private:
                owner = node.value.id if isinstance(node.value, ast.Name) else None
                if owner not in ("self", "cls") and node.attr not in own and (rel, node.attr) not in ALLOWED:
                    found.append(f"{rel}:{node.lineno} .{node.attr}")
        # inside a subclass of a Lightning class: self._name / def _name that the Lightning base defines
        module_name = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if not cls.bases:
                continue
            bases = _lightning_bases(module_name, cls.name)
            if not bases:
                continue
            inherited = _names_defined_by(bases)
            for node in ast.walk(cls):
                name = None
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node in cls.body:
                    name = node.name
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    name = node.attr
                if name and _is_private(name) and name in inherited and (rel, name) not in ALLOWED:
                    found.append(f"{rel}:{node.lineno} {cls.name}.{name}")

    assert not found, "private Lightning API used (use a public hook, or add to ALLOWED with why):\n" + "\n".join(
        sorted(set(found))
    )


def test_attached_trainer_is_none_until_a_trainer_attaches() -> None:
    from rlinf_core.callbacks.progress import RLProgressBar
    from rlinf_core.foundation.trainer import attached_trainer

    module, bar = pl.LightningModule(), RLProgressBar()
    assert attached_trainer(module) is None and attached_trainer(bar) is None and not bar.is_enabled
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, callbacks=[bar])
    module.trainer = trainer  # Lightning's public setter (the Trainer sets it the same way at fit)
    bar.setup(trainer, module, stage="fit")  # the callback hook in which a progress bar gets its trainer
    assert attached_trainer(module) is trainer and attached_trainer(bar) is trainer and bar.is_enabled
