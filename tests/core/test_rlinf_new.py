"""``rlinf new env|policy|world-model NAME``: what it writes installs (pip, not editable), is listed by ``rlinf
plugins``, passes its conformance kit and trains with a short ``rlinf fit`` on the config it ships."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlinf_core.cli.main import main
from rlinf_core.cli.new import KINDS, class_names, plan
from tests.core.test_import_graph import PLUGIN_IMPORT_PLACES, _allowed_for_plugins, _imports

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_package_imports_the_core_only_from_documented_places_in_short_lines(kind):
    for rel, text in plan(kind, "demo").items():
        assert all(len(line) <= 120 for line in text.splitlines()), rel
        if rel.endswith(".py"):
            for base, names in _imports(ast.parse(text), rel, False):
                assert base.split(".")[0] != "rlinf_core" or _allowed_for_plugins(base), (rel, base, names)
    assert PLUGIN_IMPORT_PLACES  # the same list test_import_graph checks the first-party plugins against


def test_bad_names_taken_names_and_existing_directories_are_one_line_refusals(tmp_path, capsys):
    assert main(["new", "env", "Grid-World", "--dir", str(tmp_path)]) == 2
    assert "must be lower case letters" in capsys.readouterr().err
    assert main(["new", "env", "reach", "--dir", str(tmp_path)]) == 2  # ReachEnv is core's
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ReachEnv is already registered by rlinf-core (short" in err, err
    (tmp_path / "rlinf-policy-mine").mkdir()
    assert main(["new", "policy", "mine", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert list((tmp_path / "rlinf-policy-mine").iterdir()) == []  # nothing written into it


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_written_package_installs_is_listed_passes_its_kit_and_trains(kind, tmp_path):
    name = "demo_" + kind.replace("-", "_")
    assert main(["new", kind, name, "--dir", str(tmp_path)]) == 0
    [pkg] = tmp_path.iterdir()
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps",
           "--no-build-isolation", "--target", str(site), str(pkg)]  # fmt: skip
    done = _run(pip)
    assert done.returncode == 0, done.stderr[-3000:]
    for module in pkg.glob("src/*/*.py"):  # everything below comes from the installed package
        module.unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "core" / "src")]),
           "RLINF_LOAD_PLUGINS": name}  # fmt: skip
    cli = [sys.executable, "-m", "rlinf_core.cli.main"]

    listed = _run([*cli, "plugins", "--json"], cwd=tmp_path, env=env)
    [mine] = [p for p in json.loads(listed.stdout) if p["name"] == name]
    assert mine["error"] is None and mine["distribution"] == pkg.name, mine
    assert sorted(c for names in mine["registered"].values() for c in names) == sorted(class_names(kind, name))

    tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                  str(pkg / "tests")], cwd=tmp_path, env=env)  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", tests.stdout).group(1))
    assert passed >= {"env": 7, "policy": 16, "world-model": 9}[kind], tests.stdout[-500:]

    config = f"{name}/{KINDS[kind].config}"
    if kind == "world-model":
        made = _run([*cli, f"{name}-init-states", f"{name}_init_states"], cwd=tmp_path, env=env)
        assert made.returncode == 0 and len(list((tmp_path / f"{name}_init_states").glob("traj*.npy"))) == 8, made
    fit = _run([*cli, "fit", "--config", config, "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")], cwd=tmp_path, env=env)  # fmt: skip
    assert fit.returncode == 0, fit.stdout[-2000:] + fit.stderr[-3000:]
    [run] = (tmp_path / "runs").glob("*/version_0")
    assert (run / "policy" / "model.safetensors").is_file()
