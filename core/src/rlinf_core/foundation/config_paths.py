"""Relative data paths in configs: read from the working directory, then beside the run's config files.

``rlinf fit --config a/b.yaml`` records ``a/`` (every ``--config`` of the run, in the order given), so that data a
config ships beside itself (a plugin's initial-state files next to its packaged config) is found from any working
directory, while a relative path that exists in the working directory (a run directory under ``runs/``, a path typed
on the command line) keeps meaning what it means in a shell. Outside ``rlinf`` (Python code, tests) only the working
directory is searched. ``rlinf`` writes the path it found into the run's saved ``config.yaml``
(:func:`absolute_data_paths`), so that resuming from that file finds the same data from anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_CONFIG_DIRS: list[Path] = []
RULE = "a relative path is read from the working directory, then beside each --config file"
#: config keys (at any depth) naming data directories resolved this way
DATA_PATH_KEYS = ("init_data_path",)


def set_config_files(paths: Iterable[str | os.PathLike]) -> None:
    """Record the config files of this run (``rlinf``'s command line does it; a later call replaces them)."""
    dirs: list[Path] = []
    for path in paths:
        path = Path(path).expanduser().absolute()
        for folder in (path.parent, path.resolve().parent):  # a symlinked config: beside the link, then its target
            if folder not in dirs:
                dirs.append(folder)
    _CONFIG_DIRS[:] = dirs


def config_dirs() -> list[Path]:
    """The directories of this run's config files, in the order given on the command line (a symlinked file adds
    its target's directory after its own)."""
    return list(_CONFIG_DIRS)


def candidate_paths(value: str | os.PathLike) -> list[Path]:
    """Where a path is looked for: itself when absolute; else the working directory, then each config directory."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return [path]
    places = [Path.cwd() / path, *(d / path for d in _CONFIG_DIRS)]
    return list(dict.fromkeys(places))


def resolve_data_dir(value: str | os.PathLike, key: str, hint: str = "") -> Path:
    """The directory ``value`` names (absolute), found as :func:`candidate_paths` says, or a one-line
    ``FileNotFoundError`` naming ``key`` and every place looked at.

    Args:
        value: the path a config gives.
        key: the setting's name for the message (``WorldModelEnv init_data_path``).
        hint: appended to the message (what the directory should hold, how to make it).
    """
    places = candidate_paths(value)
    for place in places:
        if place.is_dir():
            return place.absolute()
    looked = ", ".join(str(p) for p in places)
    rule = "" if Path(value).expanduser().is_absolute() else f" ({RULE})"
    raise FileNotFoundError(f"{key} {str(value)!r} is not a directory: looked at {looked}{rule}{hint}")


def absolute_data_paths(config) -> None:
    """Replace, in place, every relative :data:`DATA_PATH_KEYS` value of a parsed config (nested dicts /
    ``Namespace`` objects and lists) that is found by the rule above with its absolute path; values found nowhere
    stay as given (the class that reads them reports them)."""
    items = config.items() if hasattr(config, "items") else []
    if isinstance(config, list):
        for value in config:
            absolute_data_paths(value)
        return
    for key, value in list(items):
        if key.rsplit(".", 1)[-1] in DATA_PATH_KEYS and isinstance(value, str) and value:
            found = next((p for p in candidate_paths(value) if p.is_dir()), None)
            if found is not None:
                config[key] = str(found.absolute())
        elif hasattr(value, "items") or isinstance(value, list):
            absolute_data_paths(value)
