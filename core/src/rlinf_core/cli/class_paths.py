"""Plugin class names a config asks for, resolved before anything is built (one line for an unknown one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlinf_core.plugins.manager import Registry

# keys of RLModule / SFTModule / WorldModelTrainer / RewardModelTrainer init args that name a plugin class, and the kind
PLUGIN_KEYS = {
    "env": "env",
    "eval_env": "env",
    "policy": "policy",
    "world_model": "world_model",
    "reward_model": "world_model",
}


def _walk_class_paths(node: Any, parent_key: str | None, found: list[tuple[str, str]]) -> None:
    if isinstance(node, dict):
        cp = node.get("class_path")
        if isinstance(cp, str) and parent_key in PLUGIN_KEYS:
            found.append((PLUGIN_KEYS[parent_key], cp))
        for key, value in node.items():
            _walk_class_paths(value, key, found)
    elif isinstance(node, list):
        for value in node:
            _walk_class_paths(value, parent_key, found)


def check_config_class_paths(argv: list[str], registry: Registry) -> None:
    """Fail early, in one line, on a ``class_path`` no installed plugin provides."""
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        path = None
        if arg in ("--config", "-c") and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        if path and Path(path).is_file():
            try:
                _walk_class_paths(yaml.safe_load(Path(path).read_text()), None, found)
            except yaml.YAMLError:
                return  # jsonargparse reports YAML errors itself
        elif arg.startswith("--") and ".class_path=" in arg:
            key, value = arg[2:].split("=", 1)
            parent = key.split(".")[-2] if key.count(".") >= 1 else None
            if parent in PLUGIN_KEYS:
                found.append((PLUGIN_KEYS[parent], value))
    for kind, name in found:
        registry.resolve(kind, name)
