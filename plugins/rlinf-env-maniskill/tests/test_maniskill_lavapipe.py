"""The private lavapipe: installer script behaviour and how a process is pointed at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlinf_env_maniskill import lavapipe

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_lavapipe.sh"
INSTALLED = lavapipe.is_installed()
needs_install = pytest.mark.skipif(not INSTALLED, reason=f"lavapipe is not installed: run {lavapipe.INSTALL_HINT}")


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    drop = ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "RLINF_LAVAPIPE_ACTIVE")
    full_env = {k: v for k, v in os.environ.items() if k not in drop}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_needed_libraries_reads_elf_dependencies():
    libc_users = [p for p in ("/bin/ls", "/usr/bin/env") if Path(p).exists()]
    deps = lavapipe.needed_libraries(libc_users[0])
    assert "libc.so.6" in deps
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        lavapipe.needed_libraries(SCRIPT)


def test_installer_rejects_unknown_options_and_documents_itself():
    bad = subprocess.run(["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option --frobnicate" in bad.stderr
    helped = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "install_lavapipe.sh [--force] [DIR]" in helped.stdout


def test_installer_refuses_unsupported_distributions(tmp_path):
    out = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "lvp")],
        capture_output=True,
        text=True,
        env={**os.environ, "RLINF_DEBIAN_SUITE": "jammy"},
    )
    assert out.returncode == 1
    assert "unsupported distribution 'jammy'" in out.stderr and "\n" not in out.stderr.strip()


@needs_install
def test_rerunning_the_installer_keeps_the_install():
    out = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RLINF_LAVAPIPE_DIR": str(lavapipe.default_dir())},
    )
    assert out.returncode == 0 and "already installed" in out.stdout
    icd = json.loads((lavapipe.default_dir() / "lvp_icd.json").read_text())
    assert Path(icd["ICD"]["library_path"]).is_file()
    assert (lavapipe.default_dir() / "INSTALLED").read_text().startswith("mesa-vulkan-drivers 2")


@needs_install
def test_configure_makes_sapien_find_lavapipe_in_a_fresh_process():
    """LD_LIBRARY_PATH is not set by the caller: the preload alone must be enough."""
    out = _run_python(
        "from rlinf_env_maniskill import lavapipe; mode = lavapipe.configure(); "
        "import os; print(mode, os.environ['VK_ICD_FILENAMES']); print(lavapipe.device_summary())",
        LD_LIBRARY_PATH="",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("lavapipe ") and "llvmpipe" in out.stdout and "Supported: 1" in out.stdout
    assert "Fallback to SAPIEN builtin libvulkan" not in out.stderr


@needs_install
def test_child_processes_inherit_the_private_driver():
    d = lavapipe.default_dir()
    out = _run_python(
        "from rlinf_env_maniskill import lavapipe; print(lavapipe.configure())",
        VK_ICD_FILENAMES=str(d / "lvp_icd.json"),
        RLINF_LAVAPIPE_ACTIVE=str(d),
    )
    assert out.stdout.strip() == "lavapipe", out.stderr[-2000:]


def test_user_vulkan_settings_are_respected():
    out = _run_python(
        "from rlinf_env_maniskill import lavapipe; print(lavapipe.configure())",
        VK_ICD_FILENAMES="/nonexistent/icd.json",
    )
    assert out.stdout.strip() == "user"


def test_no_vulkan_device_fails_with_the_install_hint(tmp_path):
    """Without any usable driver the env stops with one line naming the installer."""
    out = _run_python(
        "from rlinf_env_maniskill import lavapipe\n"
        "lavapipe.configure()\n"
        "try:\n    lavapipe.check_render_device()\nexcept RuntimeError as e:\n    print('ERR', e)\n",
        RLINF_LAVAPIPE_DIR=str(tmp_path / "none"),
        VK_ICD_FILENAMES=str(tmp_path / "missing_icd.json"),
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("ERR"))
    assert "no Vulkan device" in line and "VK_ICD_FILENAMES" in line
    out = _run_python(
        "from rlinf_env_maniskill import lavapipe\n"
        "lavapipe._configured = 'system'\n"
        "lavapipe.device_summary = lambda: ''\n"
        "try:\n    lavapipe.check_render_device()\nexcept RuntimeError as e:\n    print('ERR', e)\n",
    )
    assert "install_lavapipe.sh" in out.stdout and "python -m rlinf_env_maniskill.lavapipe install" in out.stdout


def test_installer_uses_the_machines_apt_sources_and_a_failed_download_leaves_nothing(tmp_path):
    """The package source comes from the machine's apt configuration (here a private /etc/apt whose mirror is
    unreachable); the failed download exits non-zero and leaves no tree, stamp or work files."""
    etc = tmp_path / "etc-apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text("deb http://127.0.0.1:9/debian bookworm main\n")
    target = tmp_path / "lvp"
    out = subprocess.run(
        ["bash", str(SCRIPT), str(target)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RLINF_APT_ETC": str(etc), "RLINF_DEBIAN_SUITE": "bookworm"},
    )
    assert out.returncode != 0 and "error: apt-get" in out.stderr
    assert "from http://127.0.0.1:9/debian" in out.stdout, "the machine's mirror (with backports added) is used"
    assert sorted(p.name for p in target.iterdir()) == [".lock"], "nothing half-installed"
