"""The suite's own settings (pyproject.toml, conftest.py): our deprecations fail, the quick tier is quick."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_deprecation_in_our_modules_fails_and_a_third_party_one_does_not(tmp_path):
    for module in ("rlinf_probe_plugin", "some_library"):
        (tmp_path / f"{module}.py").write_text(
            textwrap.dedent("""
            import warnings

            def old():
                warnings.warn("old() is deprecated", DeprecationWarning)
                warnings.warn("old() changes", FutureWarning)
            """)
        )
        (tmp_path / f"test_{module}.py").write_text(
            textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(tmp_path)!r})
            import {module}

            def test_calls_old():
                {module}.old()
            """)
        )
    ours = _pytest(
        "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "test_rlinf_probe_plugin.py", cwd=tmp_path
    )
    theirs = _pytest(
        "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "test_some_library.py", cwd=tmp_path
    )
    assert ours.returncode == 1 and "DeprecationWarning: old() is deprecated" in ours.stdout, ours.stdout[-1500:]
    assert theirs.returncode == 0, theirs.stdout[-1500:]
    text = (ROOT / "pyproject.toml").read_text()
    assert '"ignore::DeprecationWarning"' not in text  # no blanket ignore


def test_the_quick_tier_leaves_out_the_slow_files():
    out = _pytest(
        "--collect-only",
        "-m",
        "not slow",
        "tests/test_quickstart.py",
        "tests/core/test_doc_snippets.py",
        "tests/core/test_readme_commands.py",
        cwd=ROOT,
    ).stdout
    assert "test_doc_snippets.py::" in out and "test_quickstart.py::" not in out
    assert "test_every_readme_command_has_a_variant_here" in out and "test_readme_commands_run" not in out


def test_the_longest_files_are_collected_first_in_their_order_and_exist():
    """conftest.py's LONGEST_FIRST (for scripts/test.sh's worksteal scheduling) names files that exist, moves their
    tests to the front in its order, and keeps every other test's order and each file's own order."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    missing = [name for name in conftest.LONGEST_FIRST if not (ROOT / name).is_file()]
    assert not missing, f"LONGEST_FIRST names files that are gone: {missing}"

    def item(rel: str, name: str):
        return SimpleNamespace(path=ROOT / rel, nodeid=f"{rel}::{name}", add_marker=lambda marker: None)

    first, second = conftest.LONGEST_FIRST[:2]
    items = [
        item("tests/core/test_a.py", "t1"),
        item(second, "t1"),
        item("tests/core/test_b.py", "t1"),
        item(first, "t1"),
        item(second, "t2"),
        item(first, "t2"),
        item("tests/core/test_a.py", "t2"),
    ]
    conftest.pytest_collection_modifyitems(SimpleNamespace(rootpath=ROOT), items)
    assert [i.nodeid for i in items] == [
        f"{first}::t1",
        f"{first}::t2",
        f"{second}::t1",
        f"{second}::t2",
        "tests/core/test_a.py::t1",
        "tests/core/test_b.py::t1",
        "tests/core/test_a.py::t2",
    ]
