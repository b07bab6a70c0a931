"""constraints.txt (the versions scripts/install.sh installs) satisfies every range in the pyproject files: core, each
of its extras, and every plugin."""

from __future__ import annotations

import importlib.metadata
import re
import sysconfig
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "constraints.txt"
PYPROJECTS = [ROOT / "core" / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]


def read_lock(path: Path = LOCK) -> dict[str, Version]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        (spec,) = req.specifier  # one exact pin per line
        assert spec.operator == "==" and not req.marker and not req.extras, f"not a plain pin: {line!r}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{req.name} is pinned twice"
        pins[name] = Version(spec.version)
    return pins


def ranges() -> list[tuple[str, str, Requirement]]:
    """(pyproject, its dependency group, requirement) for every dependency of every distribution of this repo."""
    out = []
    for path in PYPROJECTS:
        project = tomllib.loads(path.read_text())["project"]
        where = path.relative_to(ROOT).as_posix()
        out += [(where, "dependencies", Requirement(r)) for r in project.get("dependencies", [])]
        for extra, reqs in project.get("optional-dependencies", {}).items():
            out += [(where, f"[{extra}]", Requirement(r)) for r in reqs]
    return out


OURS = {canonicalize_name(tomllib.loads(p.read_text())["project"]["name"]) for p in PYPROJECTS}


def test_the_lock_pins_each_package_once_and_exactly():
    pins = read_lock()
    assert len(pins) > 100  # a full resolution, not a handful of lines
    assert not OURS & pins.keys(), "the lock pins one of this repository's own distributions"


@pytest.mark.parametrize("where,group,req", ranges(), ids=lambda v: str(v) if isinstance(v, Requirement) else None)
def test_the_lock_satisfies_the_pyproject_range(where, group, req):
    if canonicalize_name(req.name) in OURS:  # installed from the checkout (editable), never from the lock
        return
    if req.marker is not None and not req.marker.evaluate({"extra": group.strip("[]")}):
        return  # not on the platform the lock was made on
    pins = read_lock()
    name = canonicalize_name(req.name)
    assert name in pins, f"{where} {group} requires {req}, which constraints.txt does not pin"
    assert req.specifier.contains(pins[name], prereleases=True), (
        f"constraints.txt pins {req.name}=={pins[name]}, outside {where} {group}: {req}"
    )


def test_this_environment_runs_the_locked_versions():
    """What scripts/install.sh installed is what the lock says (re-run it after pulling a new lock)."""
    pins = read_lock()
    differ = []
    # the venv's own site-packages: once something imports setuptools, sys.path also holds setuptools/_vendor,
    # whose vendored copies (packaging, zipp, ...) are not installed packages
    site_packages = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    for dist in importlib.metadata.distributions(path=site_packages):
        name = canonicalize_name(dist.metadata["Name"])
        if name in pins and Version(Version(dist.version).public) != pins[name]:
            differ.append(f"{name} {dist.version} (the lock: {pins[name]})")
    assert not differ, "installed beside constraints.txt: " + ", ".join(sorted(differ)) + "; run scripts/install.sh"


def test_the_versions_the_readme_names_are_the_locks():
    named = re.findall(r"`([A-Za-z0-9][A-Za-z0-9_.-]*)==([^`\s]+)`", (ROOT / "README.md").read_text())
    assert len(named) >= 10, "the README names the versions CI ran on"
    pins = read_lock()
    wrong = [f"{name}=={version}" for name, version in named if pins.get(canonicalize_name(name)) != Version(version)]
    assert not wrong, f"the README names versions that constraints.txt does not pin: {wrong}"


def test_read_lock_takes_exact_pins_only(tmp_path):
    lock = tmp_path / "constraints.txt"
    lock.write_text("# a comment\n\nlightning==2.5.0  # why\nTorch==2.13.0\n")
    assert read_lock(lock) == {"lightning": Version("2.5.0"), "torch": Version("2.13.0")}
    for bad in ["torch>=2.4\n", "torch==2.13.0\ntorch==2.12.0\n", 'torch==2.13.0; python_version < "3"\n']:
        lock.write_text(bad)
        with pytest.raises(AssertionError):
            read_lock(lock)


def test_install_sh_installs_every_package_from_the_lock():
    """Each pip call of scripts/install.sh passes the lock, and the packages it names outside the pyproject files
    (the ones it installs without their dependencies) are pinned in it."""
    script = (ROOT / "scripts" / "install.sh").read_text()
    calls = [line.strip() for line in script.splitlines() if line.strip().startswith("pip_install ")]
    assert len(calls) >= 3
    args_line = next(line for line in script.splitlines() if line.startswith("args=("))
    for call in calls:
        assert '-c "$LOCK"' in call or call == 'pip_install "${args[@]}"' and '-c "$LOCK"' in args_line, call
    pins = read_lock()
    no_deps = [call for call in calls if "--no-deps" in call]
    named = [word for call in no_deps for word in call.split()[1:] if not word.startswith(("-", '"'))]
    assert "openpi-server" in named and "openpi-client" in named
    assert not [name for name in named if canonicalize_name(name) not in pins], named
