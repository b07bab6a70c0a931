"""tests/memory_watch.py, the per-test peak memory plugin, in a pytest of its own: the figures it reports and the
limits it enforces, with and without xdist workers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parent / "memory_watch.py"

CONFTEST = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("memory_watch", {str(PLUGIN)!r})
memory_watch = importlib.util.module_from_spec(spec)
sys.modules["memory_watch"] = memory_watch
spec.loader.exec_module(memory_watch)
pytest_addoption = memory_watch.pytest_addoption
pytest_configure = memory_watch.pytest_configure
"""

TESTS = """
import subprocess, sys

def test_small():
    pass

def test_grows_its_own_process():
    block = b"x" * (200 * 2**20)  # 200 MiB, every page written
    del block

def test_starts_a_large_child():
    subprocess.run([sys.executable, "-c", "block = b'x' * (600 * 2**20); import time; time.sleep(1.5)"], check=True)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-q", *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def rows(log: Path) -> dict[str, dict[str, str]]:
    header, *lines = [line.split("\t") for line in log.read_text().splitlines()]
    return {r[0].split("::")[-1]: dict(zip(header, r)) for r in lines}


def test_each_tests_peak_and_the_top_list(tmp_path):
    proc = run(tmp_path, f"--memory-log={tmp_path / 'memory.tsv'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "peak memory: the 3 largest tests" in proc.stdout
    top = proc.stdout.split("peak memory:")[1]
    assert top.index("test_starts_a_large_child") < top.index("test_small")  # the largest process first
    figures = rows(tmp_path / "memory.tsv")
    MiB = 2**20
    grow = figures["test_grows_its_own_process"]
    assert int(grow["peak"]) - int(grow["rss_start"]) >= 195 * MiB  # the kernel's exact peak, not a sample
    assert int(grow["rss_end"]) < int(grow["peak"]) - 150 * MiB  # freed again
    child = figures["test_starts_a_large_child"]
    assert int(child["largest_child"]) >= 600 * MiB and int(child["children_peak"]) >= 590 * MiB
    small = figures["test_small"]
    assert int(small["largest_child"]) == 0 and int(small["peak"]) - int(small["rss_start"]) < 50 * MiB
    assert {r["worker"] for r in figures.values()} == {"main"}


def test_a_process_over_the_limit_fails_the_run_naming_the_test(tmp_path):
    proc = run(tmp_path, "--memory-limit-process", "0.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("memory limit exceeded")]
    reached = re.search(r"test_inner.py::test_starts_a_large_child: a child process of it reached ([\d.]+) GiB", line)
    assert reached and 0.58 <= float(reached[1]) < 0.7, line
    assert "the limit is 0.50 GiB per process" in line


def test_under_xdist_the_workers_report_to_the_controller(tmp_path):
    proc = run(tmp_path, "-n", "2", "--memory-limit-total", "0.05", f"--memory-log={tmp_path / 'memory.tsv'}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout and "peak memory: the 3 largest tests" in proc.stdout
    assert {r["worker"] for r in rows(tmp_path / "memory.tsv").values()} <= {"gw0", "gw1"}
    assert "gw0: " in proc.stdout and "RSS after its last test" in proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("memory limit exceeded")]
    assert "the run's processes together reached" in line and "the limit is 0.05 GiB" in line
