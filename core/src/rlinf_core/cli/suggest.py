""" "Did you mean" for misspelled config keys: ``--model.init_args.optim.learning_rate`` -> ``lr``.

LightningCLI (jsonargparse) reports an unknown key as ``model: unrecognized arguments: --optim.learning_rate=0.1``
without alternatives. On that error this module lists the keys the class accepts (the innermost class_path of the
error, or the trainer; its ``__init__`` signature with dataclass groups flattened, as jsonargparse reads it) and
appends the closest one to the message.
"""

from __future__ import annotations

import difflib
import importlib
import re
from argparse import ArgumentError
from collections.abc import Callable
from typing import Any

_UNRECOGNIZED = re.compile(r"(?:^|: )(?:(?P<group>[\w.]+): )?unrecognized arguments: (?P<args>.+)$")


def initials(key: str) -> str:
    return "".join(word[0] for word in key.split("_") if word)


def closest_key(key: str, accepted: list[str]) -> str | None:
    """The accepted key closest to ``key`` (a typo, or an abbreviation such as ``learning_rate`` / ``lr``)."""
    parent, _, leaf = key.rpartition(".")
    siblings = [k for k in accepted if k.rpartition(".")[0] == parent]
    for cand in siblings:
        cand_leaf = cand.rpartition(".")[2]
        if ("_" in leaf and initials(leaf) == cand_leaf) or ("_" in cand_leaf and initials(cand_leaf) == leaf):
            return cand
    close = difflib.get_close_matches(leaf, [k.rpartition(".")[2] for k in siblings], n=1, cutoff=0.6)
    if close:
        return f"{parent}.{close[0]}" if parent else close[0]
    close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.8)
    return close[0] if close else None


def _resolve_class(name: str, base: type) -> type | None:
    if "." in name:
        module, _, qualname = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError):
            return None
    todo, seen = [base], set()
    while todo:
        cls = todo.pop()
        if cls.__name__ == name:
            return cls
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return None


def accepted_keys(cls: type) -> list[str]:
    """The dotted keys ``cls``'s constructor accepts (dataclass groups flattened), as jsonargparse reads them."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "x", fail_untyped=False)
    return [k.removeprefix("x.") for k in parser.get_defaults().keys()]


def _chain(exc: BaseException) -> list[str]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(str(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return out


def suggestion(exc: BaseException, argv: list[str]) -> str | None:
    """`` Did you mean --model.init_args.optim.lr?`` for an unrecognized-arguments error, else ``None``."""
    texts = _chain(exc)
    unknown = class_path = None
    for text in texts:  # outermost first: the last match is the innermost class
        match = _UNRECOGNIZED.search(text) or re.search(r"unrecognized arguments: (?P<args>.+)", text)
        if match and unknown is None:
            unknown = [a.split("=", 1)[0].removeprefix("--") for a in match.group("args").split() if a.startswith("--")]
        option = re.search(
            r"Option '([\w.]+)' is not accepted|(?:Group '([\w.]+)' )?does not accept option "
            r"'([\w.]+)'",
            text,
        )
        if option and unknown is None:  # the second form: an unknown key in a --config file
            unknown = [option.group(1) or ".".join(k for k in option.group(2, 3) if k)]
        found = re.findall(r"Problem with given class_path '([^']+)'", text)
        class_path = found[-1] if found else class_path
    if not unknown:
        return None
    import lightning.pytorch as pl

    key = unknown[0]
    if class_path is not None:
        cls = _resolve_class(class_path, pl.LightningModule)
        typed = next((a.split("=", 1)[0] for a in argv if a.startswith("--") and a.split("=", 1)[0].endswith(key)), "")
        nested = max((re.findall(r'Parser key "([^"]+)"', t) for t in texts), key=len)  # model, env, ...
        prefix = typed[: len(typed) - len(key)] if typed else "--" + "".join(f"{k}.init_args." for k in nested)
    else:  # top level: the trainer and rlinf's checkpoint section
        from rlinf_core.run.checkpointing import RLCheckpoint

        sections = {"trainer": pl.Trainer, "checkpoint": RLCheckpoint}
        head, _, key = key.partition(".")
        cls, prefix = sections.get(head), f"--{head}."
    if cls is None or not key:
        return None
    where = config_file_with(argv, unknown[0])
    if where:  # a YAML key: name the file, and the key as written there
        prefix, head = prefix.removeprefix("--"), f" In {where}: "
    else:
        head = " "
    parent, _, leaf = key.rpartition(".")
    if leaf == "num_workers" and any(c.__name__ == "Env" for c in cls.__mro__):  # the env's worker count moved
        new = "rollout.eval_env_workers" if "eval_env" in typed or "eval_env" in nested else "rollout.env_workers"
        return f"{head}An env no longer takes num_workers: its worker processes are --model.init_args.{new}"
    moved = (getattr(cls, "FLAT_SETTINGS", None) or {}).get(leaf)  # an RLinf flat key now in a config group
    if moved is not None:
        grouped = ".".join(p for p in (parent, *moved) if p)
        return f"{head}RLinf's flat {leaf} is {'.'.join(moved)} in {cls.__name__}: use {prefix}{grouped}"
    try:
        best = closest_key(key, accepted_keys(cls))
    except Exception:  # noqa: BLE001 - a suggestion is a courtesy: never replace the real error
        best = None
    if best:
        return f"{head}{'d' if where else 'D'}id you mean {prefix}{best}?"
    return f"{head.rstrip(': ')}." if where else None


def config_file_with(argv: list[str], dotted: str) -> str | None:
    """The last ``--config`` file (the one that wins) holding the key ``dotted`` (``init_args`` levels optional),
    or ``None`` when it came from the command line."""
    if any(a.startswith("--") and a.split("=", 1)[0].endswith("." + dotted.rpartition(".")[2]) for a in argv):
        return None
    import yaml

    from rlinf_core.cli.checks import _config_paths

    wanted = [k for k in dotted.split(".") if k != "init_args"]
    found = None
    for path in _config_paths(argv):
        try:
            with open(path) as f:
                data = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        if _holds(data, wanted):
            found = path
    return found


def _holds(node: Any, keys: list[str]) -> bool:
    """``keys`` is a path (skipping ``init_args``) to a key in ``node``, or a tail of one."""
    if not isinstance(node, dict):
        return isinstance(node, list) and any(_holds(n, keys) for n in node)
    inner = node.get("init_args") if isinstance(node.get("init_args"), dict) else {}
    for mapping in (node, inner):
        if keys[0] in mapping and (len(keys) == 1 or _holds(mapping[keys[0]], keys[1:])):
            return True
    return any(_holds(v, keys) for k, v in node.items() if k != "init_args") or (
        bool(inner) and any(_holds(v, keys) for v in inner.values())
    )


def with_key_suggestions(fn: Callable[[], Any], argv: list[str]) -> Callable[[], Any]:
    """``fn`` whose unrecognized-argument errors end with the closest accepted key."""

    def run() -> Any:
        try:
            return fn()
        except ArgumentError as exc:
            from rlinf_core.cli.error_report import describe

            hint = suggestion(exc, argv)
            text = describe(exc)
            if not hint or text is None:
                raise
            raise ArgumentError(None, text.rstrip(". ") + "." + hint) from None  # one line: the cause and the hint

    return run
