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
from tests.core.test_import_graph import PLUGIN_IMPORT_PLACES, _allowed_for_plugins, _imports

from rlinf_core.cli.main import main
from rlinf_core.cli.new import KINDS, class_names, plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_package_imports_the_core_only_from_documented_places_in_short_lines(kind):
    for rel, text in plan(kind, "demo").items():
        assert all(len(line) <= 120 for line in text.splitlines()), rel
        if rel.endswith(".py"):
            for base, names in _imports(ast.parse(text), rel, False):
                assert base.split(".")[0] != "rlinf_core" or _allowed_for_plugins(base), (rel, base, names)
    assert PLUGIN_IMPORT_PLACES  # the same list test_import_graph checks the first-party plugins against


@pytest.mark.parametrize("name", ["demo", "a_rather_long_robot_name"])
def test_the_readme_aligns_its_comments_and_names_the_example(name):
    for kind, spec in KINDS.items():
        readme = plan(kind, name)["README.md"]
        block = readme.split("```bash\n")[1].split("```")[0].splitlines()
        assert len({line.index("# ") for line in block}) == 1, block  # one comment column
        assert f"{spec.run.format(name=name)}" in block[-1] and "What the example should print" in readme


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
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, **kw)


@pytest.mark.slow
def test_the_written_packages_install_are_listed_pass_their_kits_and_train(tmp_path):
    """All three kinds in one flow (one pip install, one listing, one pytest run, then a short fit each): about a
    minute less than a test per kind."""
    names = {kind: "demo_" + kind.replace("-", "_") for kind in sorted(KINDS)}
    for kind, name in names.items():
        assert main(["new", kind, name, "--dir", str(tmp_path / "src")]) == 0
    packages = sorted((tmp_path / "src").iterdir())
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps",
           "--no-build-isolation", "--target", str(site), *map(str, packages)]  # fmt: skip
    done = _run(pip)
    assert done.returncode == 0, done.stderr[-3000:]
    for module in tmp_path.glob("src/*/src/*/*.py"):  # everything below comes from the installed packages
        module.unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "core" / "src")]),
           "RLINF_LOAD_PLUGINS": ",".join(names.values())}  # fmt: skip
    cli = [sys.executable, "-m", "rlinf_core.cli.main"]

    listed = {p["name"]: p for p in json.loads(_run([*cli, "plugins", "--json"], cwd=tmp_path, env=env).stdout)}
    for kind, name in names.items():
        assert listed[name]["error"] is None and listed[name]["distribution"].startswith(KINDS[kind].prefix)
        registered = sorted(c for group in listed[name]["registered"].values() for c in group)
        assert registered == sorted(class_names(kind, name)), listed[name]

    tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs",
                  *[str(p / "tests") for p in packages]], cwd=tmp_path, env=env)  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    from rlinf_core.testing import conformance
    from rlinf_core.testing import world_model_conformance as wm

    def count(kit: type) -> int:
        return sum(name.startswith("test_") for name in dir(kit))

    # every kit test ran, none skipped (the policy kit twice: with and without a critic); the world model and the
    # reward model implement the fine-tuning interface too
    kits = (
        count(conformance.EnvPluginTests)
        + 2 * count(conformance.PolicyPluginTests)
        + count(wm.WorldModelPluginTests)
        + count(wm.RewardModelPluginTests)
    )
    ran = re.search(r"(\d+) passed", tests.stdout)
    assert ran and int(ran.group(1)) == kits and "skipped" not in tests.stdout, tests.stdout[-1500:]

    # the world model's initial states are package data beside its config: the fit runs from a directory without
    # them (tmp_path); the package's command writes them again
    shipped = sorted(site.glob("rlinf_wm_demo_world_model/configs/demo_world_model/init_states/traj*.npy"))
    assert len(shipped) == 16
    made = _run([*cli, "demo_world_model-init-states", "again"], cwd=tmp_path, env=env)
    assert made.returncode == 0 and [p.name for p in sorted(tmp_path.glob("again/*.npy"))] == [p.name for p in shipped]
    for kind, name in names.items():  # 1 of the example's 40 RL steps: README.md gives what the whole run prints
        fit = _run([*cli, "fit", "--config", f"{name}/{KINDS[kind].config}", "--trainer.default_root_dir",
                    str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
                    "--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1"],
                   cwd=tmp_path, env=env)  # fmt: skip
        assert fit.returncode == 0, fit.stdout[-2000:] + fit.stderr[-3000:]
        assert "eval after step 1: success_once" in fit.stdout, fit.stdout[-2000:]
        run = tmp_path / "runs" / f"{name}_{KINDS[kind].config.removesuffix('.yaml')}" / "version_0"
        assert (run / "policy" / "model.safetensors").is_file(), sorted(tmp_path.glob("runs/*/*"))
