"""A plugin written for the core's old import name ``rlinf`` fails to load with the cause (the move to ``rlinf_core``),
not "reinstall it"; other import failures keep the reinstall hint."""

import gc
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest

from rlinf_core.plugins.entries import PluginError, moved_package_cause
from rlinf_core.plugins.manager import Registry


@pytest.fixture(autouse=True)
def forget_fake_modules():
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("old_api_", "rlinf")) and not name.startswith("rlinf_core"):
            del sys.modules[name]
    gc.collect()


def _plugin(tmp_path, monkeypatch, name: str, source: str) -> EntryPoint:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return EntryPoint(name=name, value=name, group="rlinf")


MOVE = "it imports the package `rlinf`, which is now `rlinf_core`"


def test_an_old_plugin_gets_the_move_as_its_one_line_cause(tmp_path, monkeypatch):
    ep = _plugin(tmp_path, monkeypatch, "old_api_plugin", "from rlinf import hookimpl\n")
    err = Registry().load(entry_points_=[ep]).plugins["old_api_plugin"].error
    assert "No module named 'rlinf'" in err and MOVE in err and "Migrating from `rlinf`" in err, err
    assert "reinstall" not in err and "\n" not in err and "RLINF_BLOCK_PLUGINS=old_api_plugin" in err


def test_beside_upstream_rlinf_a_missing_name_is_the_same_cause(tmp_path, monkeypatch):
    (tmp_path / "rlinf").mkdir()  # stands in for PyPI's upstream RLinf: a package `rlinf` without our names
    (tmp_path / "rlinf" / "__init__.py").write_text("")
    ep = _plugin(tmp_path, monkeypatch, "old_api_beside_plugin", "from rlinf import hookimpl\n")
    err = Registry().load(entry_points_=[ep]).plugins["old_api_beside_plugin"].error
    assert "cannot import name 'hookimpl'" in err and MOVE in err, err


def test_a_class_registered_by_path_whose_module_uses_the_old_name_names_the_move(tmp_path, monkeypatch):
    (tmp_path / "old_api_envs.py").write_text("from rlinf.envs.base import Env\n\nclass OldEnv(Env):\n    pass\n")
    ep = _plugin(
        tmp_path,
        monkeypatch,
        "old_api_lazy_plugin",
        """
        from rlinf_core import hookimpl

        @hookimpl
        def register_envs(register):
            register("old_api_envs:OldEnv")
    """,
    )
    registry = Registry().load(entry_points_=[ep])
    with pytest.raises(PluginError, match="which is now `rlinf_core`") as caught:
        registry.classes["OldEnv"].cls
    assert "\n" not in str(caught.value) and "No module named 'rlinf'" in str(caught.value)


def test_other_import_failures_keep_the_reinstall_hint(tmp_path, monkeypatch):
    ep = _plugin(tmp_path, monkeypatch, "old_api_other_plugin", "import rlinfx_not_installed\n")
    err = Registry().load(entry_points_=[ep]).plugins["old_api_other_plugin"].error
    assert "reinstall it" in err and MOVE not in err
    assert moved_package_cause(ImportError("cannot import name 'x' from 'numpy'", name="numpy")) is None
    assert moved_package_cause(ValueError("rlinf")) is None
