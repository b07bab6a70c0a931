"""Configs shipped inside installed packages, reachable by a short name.

Every rlinf package (core and each plugin named by an ``rlinf`` entry point) may ship YAML configs as
package data under ``<package>/configs/``; ``libero/spatial.yaml`` is then the file
``rlinf_env_libero/configs/libero/spatial.yaml``. ``rlinf fit --config libero/spatial.yaml`` uses it
when no such file exists relative to the working directory, and ``rlinf configs`` lists them all.
Packages are located without importing them (no simulator or model library is loaded).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

CORE_PACKAGE = "rlinf_core"  # the import package (upstream RLinf installs a package named rlinf)
CONFIG_FLAGS = ("--config", "-c")


@dataclass(frozen=True)
class ShippedConfig:
    """One shipped config.

    Args:
        name: short name, the path below the package's ``configs/`` (``libero/spatial.yaml``).
        package: the top-level package that ships it.
        path: the file.
    """

    name: str
    package: str
    path: Path

    @property
    def description(self) -> str:
        """The first sentence of the file's header comment (what it runs), at most 110 characters."""
        header = []
        with open(self.path) as f:
            for line in f:
                if not line.startswith("#"):
                    break
                header.append(line.strip("# \n"))
        text = " ".join(h for h in header if h)
        end = next((i + 1 for i, ch in enumerate(text) if ch == "." and text[i + 1 : i + 2] in (" ", "")), len(text))
        text = text[:end]
        return text if len(text) <= 110 else text[:109].rstrip() + "…"


def _package_dir(package: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def config_packages() -> list[str]:
    """Core first, then the top-level packages of the installed plugins' entry points, sorted."""
    plugins = {ep.value.split(".")[0].split(":")[0] for ep in entry_points(group="rlinf")}
    return [CORE_PACKAGE, *sorted(plugins - {CORE_PACKAGE})]


def shipped_configs() -> list[ShippedConfig]:
    """Every shipped config of every installed rlinf package, by package, then name."""
    out = []
    for package in config_packages():
        root = _package_dir(package)
        if root is None or not (root / "configs").is_dir():
            continue
        base = root / "configs"
        for path in sorted(base.rglob("*.yaml")):
            if not path.name.startswith("_"):
                out.append(ShippedConfig(path.relative_to(base).as_posix(), package, path))
    return out


def find_shipped_config(name: str) -> Path:
    """The file of the shipped config ``name`` (``libero/spatial.yaml``), or a one-line ``FileNotFoundError``."""
    wanted = name.removeprefix("configs/")
    matches = [c for c in shipped_configs() if c.name == wanted]
    if len(matches) > 1:
        raise FileNotFoundError(
            f"config '{name}' is shipped by several packages ({', '.join(c.package for c in matches)}); "
            f"pass the file path instead: {matches[0].path}"
        )
    if not matches:
        raise FileNotFoundError(
            f"config '{name}' is neither a file nor a shipped config; `rlinf configs` lists the shipped ones"
        )
    return matches[0].path


# which distribution ships the configs under a name prefix (longest prefix first), for an install hint when the
# package is not installed; tests/core/test_shipped_configs.py checks it against every installed package's configs
CONFIG_PROVIDERS = {
    "metaworld/mt50_ppo_openpi": "rlinf-policy-openpi",
    "metaworld/ml45_ppo_openpi": "rlinf-policy-openpi",
    "libero/": "rlinf-env-libero",
    "maniskill/": "rlinf-env-maniskill",
    "metaworld/": "rlinf-env-metaworld",
    "openvla/": "rlinf-policy-openvla",
    "opensora/": "rlinf-wm-opensora",
    "wan/": "rlinf-wm-wan",
    "toy/": "rlinf-core",
    "scale/": "rlinf-core",
}


def config_provider(name: str) -> str | None:
    """The distribution that ships the config ``name`` (``libero/spatial.yaml`` -> ``rlinf-env-libero``)."""
    name = name.removeprefix("configs/")
    return next((d for p, d in sorted(CONFIG_PROVIDERS.items(), key=lambda i: -len(i[0])) if name.startswith(p)), None)


def missing_config_message(value: str) -> str:
    """One line for a ``--config`` that is neither a file nor a shipped config: the install hint when the package
    that ships that name is not installed, else the nearest file beside it or shipped name."""

    name = value.removeprefix("configs/")
    dist = config_provider(name)
    if dist is not None:
        try:
            importlib.metadata.distribution(dist)  # looked up at call time: tests stand in for it
        except importlib.metadata.PackageNotFoundError:
            return (
                f"config '{value}' is shipped by {dist}, which is not installed: pip install -e plugins/{dist} "
                f"(or pip install {dist})"
            )
    shipped = {c.name for c in shipped_configs()}
    path = Path(value)
    beside = [str(p) for p in path.parent.glob("*.y*ml")] if path.parent.is_dir() else []
    close = difflib.get_close_matches(value, beside, n=1, cutoff=0.6) or difflib.get_close_matches(
        name, sorted(shipped), n=1, cutoff=0.6
    )
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"config '{value}' is neither a file nor a shipped config{hint} (`rlinf configs` lists the shipped ones)"


def resolve_config_args(argv: list[str]) -> list[str]:
    """``argv`` with every ``--config NAME`` that is not an existing file replaced by its shipped file.

    Names that are neither stay as they are (jsonargparse then reports them)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg in CONFIG_FLAGS and i + 1 < len(out):
            out[i + 1] = _resolve(out[i + 1])
        elif arg.startswith("--config="):
            out[i] = "--config=" + _resolve(arg.split("=", 1)[1])
    return out


def _resolve(value: str) -> str:
    if Path(value).exists() or not value.endswith((".yaml", ".yml")):
        return value
    try:
        return str(find_shipped_config(value))
    except FileNotFoundError:
        return value


def configs_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlinf configs",
        description="List the configs shipped inside installed rlinf packages; pass a "
        "name to `rlinf fit --config NAME`.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    opts = parser.parse_args(argv)
    found = shipped_configs()
    if opts.json:
        print(
            json.dumps(
                [
                    {"name": c.name, "package": c.package, "path": str(c.path), "description": c.description}
                    for c in found
                ],
                indent=2,
            )
        )
        return 0
    for package in dict.fromkeys(c.package for c in found):
        print(f"{package}:")
        mine = [c for c in found if c.package == package]
        width = max(len(c.name) for c in mine)
        for c in mine:
            print(f"  {c.name:<{width}}  {c.description}")
    return 0
