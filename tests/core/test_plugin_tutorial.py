"""docs/plugin_tutorial.md's tutorial, run: its files are written out, the package is pip-installed (not editable),
its conformance tests pass and its shipped config trains through ``rlinf fit --config slide/grpo.yaml``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugin_tutorial.md"


def tutorial_files() -> dict[str, str]:
    """``{relative path: text}`` of every fenced block whose first line is ``# file: <path>``."""
    files = {}
    for block in re.findall(r"```[a-z]+\n(.*?)```", DOC.read_text(), re.S):
        first, _, body = block.partition("\n")
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ").strip()] = body
    return files


def test_the_tutorial_has_an_env_a_policy_a_world_model_tests_and_a_config():
    files = tutorial_files()
    assert {"pyproject.toml", "src/rlinf_slide/plugin.py", "src/rlinf_slide/env.py", "src/rlinf_slide/policy.py",
            "src/rlinf_slide/world_model.py", "src/rlinf_slide/tools.py", "tests/test_slide.py",
            "src/rlinf_slide/configs/slide/grpo.yaml"} <= set(files)  # fmt: skip
    assert all(len(line) <= 120 for text in files.values() for line in text.splitlines())


def test_the_tutorial_package_installs_passes_its_tests_and_trains(tmp_path):
    pkg = tmp_path / "rlinf-slide"
    for rel, text in tutorial_files().items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", "--target", str(site), str(pkg)],
                   check=True, capture_output=True)  # fmt: skip
    shutil.rmtree(pkg / "src")  # everything below comes from the installed package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "core" / "src")]),
           "RLINF_LOAD_PLUGINS": "slide"}  # fmt: skip
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")],
                           cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert re.search(r"\b2[0-9] passed", tests.stdout), tests.stdout[-500:]
    cli = [sys.executable, "-m", "rlinf_core.cli.main"]
    listed = subprocess.run([*cli, "configs"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert re.search(r"^rlinf_slide:\n  slide/grpo\.yaml\b", listed.stdout, re.M), listed.stdout
    hello = subprocess.run([*cli, "slide-hello", "now"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert hello.returncode == 0 and hello.stdout == "slide the block onto the line now\n", hello.stderr[-2000:]
    fit = subprocess.run([*cli, "fit", "--config", "slide/grpo.yaml", "--trainer.default_root_dir", str(tmp_path),
                          "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")],
                         cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert fit.returncode == 0, fit.stdout[-2000:] + fit.stderr[-3000:]
    assert (tmp_path / "runs" / "rlinf" / "version_0" / "policy" / "model.safetensors").is_file()
