"""Configs travel with the packages: package data, short names, ``rlinf configs``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rlinf_core.cli.configs import find_shipped_config, resolve_config_args, shipped_configs
from rlinf_core.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_every_repo_config_is_a_link_to_a_shipped_config_with_the_same_short_name():
    shipped = {c.name: c.path.resolve() for c in shipped_configs()}
    repo = sorted((ROOT / "configs").rglob("*.yaml"))
    assert repo and len(shipped) == len(repo)
    for path in repo:
        name = path.relative_to(ROOT / "configs").as_posix()
        assert shipped[name] == path.resolve(), name


def test_short_name_resolves_inside_packages_unless_a_local_file_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = resolve_config_args(["fit", "--config", "libero/spatial.yaml", "--config=toy/reach_ppo.yaml"])
    assert Path(argv[2]) == find_shipped_config("libero/spatial.yaml")
    assert "rlinf_env_libero" in Path(argv[2]).parts
    assert argv[3] == f"--config={find_shipped_config('toy/reach_ppo.yaml')}"
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "reach_ppo.yaml").write_text("seed_everything: 1\n")
    assert resolve_config_args(["fit", "-c", "toy/reach_ppo.yaml"])[2] == "toy/reach_ppo.yaml"
    assert resolve_config_args(["fit", "--config", "nope/none.yaml"])[2] == "nope/none.yaml"


def test_rlinf_configs_lists_core_and_plugin_configs(capsys):
    assert main(["configs", "--json"]) == 0
    rows = {r["name"]: r["package"] for r in json.loads(capsys.readouterr().out)}
    assert rows["toy/reach_ppo.yaml"] == "rlinf_core"
    assert rows["libero/spatial.yaml"] == "rlinf_env_libero"
    assert rows["maniskill/maniskill_ppo_openvla.yaml"] == "rlinf_env_maniskill"
    assert rows["metaworld/quickstart_grpo.yaml"] == "rlinf_env_metaworld"
    assert rows["openvla/reach_grpo_oft_tiny.yaml"] == "rlinf_policy_openvla"


def test_a_non_editable_wheel_ships_its_configs_and_they_resolve_from_it(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "plugins" / "rlinf-env-metaworld", src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)], check=True)
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), *map(str, wheels.glob("*.whl"))],
                   check=True)  # fmt: skip
    shutil.rmtree(src)  # nothing may come from the source tree
    probe = (
        "from rlinf_core.cli.configs import find_shipped_config; "
        "print(find_shipped_config('metaworld/quickstart_grpo.yaml'))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "core" / "src")])}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    path = Path(out.stdout.strip())
    assert path.is_relative_to(site) and path.read_text().startswith(
        (ROOT / "configs" / "metaworld" / "quickstart_grpo.yaml").read_text()[:40]
    )


def test_rlinf_configs_describes_each_config_by_its_header(capsys):
    from rlinf_core.cli.configs import shipped_configs

    found = shipped_configs()
    assert all(c.description for c in found), [c.name for c in found if not c.description]
    assert all(len(c.description) <= 110 for c in found)
    assert main(["configs"]) == 0
    listed = capsys.readouterr().out
    assert re.search(
        r"^  toy/reach_grpo\.yaml +GRPO on the built-in ReachEnv with the built-in TinyVLAPolicy", listed, re.M
    )
    rows = json.loads((main(["configs", "--json"]), capsys.readouterr().out)[1])
    assert all(r["description"] for r in rows)
