"""Plugin loading, registration errors and the rlinf command."""

import gc
import json
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rlinf_core.cli.class_paths import check_config_class_paths
from rlinf_core.cli.main import main
from rlinf_core.plugins.manager import PluginError, Registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def forget_fake_plugins():
    """Fake plugin modules (and the Env subclasses they define) must not outlive their test:
    jsonargparse resolves short class names among all live subclasses."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.endswith("_plugin"):
            del sys.modules[name]
    gc.collect()


def fake_plugin(tmp_path, monkeypatch, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return EntryPoint(name=name, value=name, group="rlinf")


def test_core_plugin_registers_builtins():
    registry = Registry().load(entry_points_=[])
    assert registry.plugins["core"].distribution == "rlinf-core"
    assert {"ReachEnv", "WorldModelEnv"} <= set(registry.names("env"))
    assert "TinyVLAPolicy" in registry.names("policy")
    assert registry.classes["ReachEnv"].plugin == "core"


def test_broken_import_names_plugin_and_hint(tmp_path, monkeypatch):
    ep = fake_plugin(tmp_path, monkeypatch, "broken_plugin", "import not_a_real_module_xyz\n")
    registry = Registry().load(entry_points_=[ep])
    err = registry.plugins["broken_plugin"].error
    assert "broken_plugin" in err and "not_a_real_module_xyz" in err and "RLINF_BLOCK_PLUGINS" in err
    assert "\n" not in err


def test_misspelled_hook_is_reported(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "typo_plugin",
        """
        from rlinf_core import hookimpl

        @hookimpl
        def register_env(register):
            pass
    """,
    )
    err = Registry().load(entry_points_=[ep]).plugins["typo_plugin"].error
    assert "unknown hook 'register_env'" in err and "register_envs" in err


def test_duplicate_short_names_name_both_distributions(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "dup_plugin",
        """
        from rlinf_core import hookimpl
        from rlinf_core.builtin.toy_env import ReachEnv as Base

        class ReachEnv(Base):
            pass

        @hookimpl
        def register_envs(register):
            register(ReachEnv)
    """,
    )
    registry = Registry().load(entry_points_=[ep])
    err = registry.plugins["dup_plugin"].error
    assert "'ReachEnv' is provided by both rlinf-core" in err
    assert registry.classes["ReachEnv"].plugin == "core"


def test_wrong_base_class_is_rejected(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "base_plugin",
        """
        from rlinf_core import hookimpl

        class NotAnEnv:
            pass

        @hookimpl
        def register_envs(register):
            register(NotAnEnv)
    """,
    )
    err = Registry().load(entry_points_=[ep]).plugins["base_plugin"].error
    assert "not a subclass of rlinf_core.contracts.env.Env" in err


def test_block_and_load_env_vars(tmp_path, monkeypatch):
    ep = fake_plugin(tmp_path, monkeypatch, "ok_plugin", "x = 1\n")
    monkeypatch.setenv("RLINF_BLOCK_PLUGINS", "ok_plugin")
    assert "ok_plugin" not in Registry().load(entry_points_=[ep]).plugins
    monkeypatch.delenv("RLINF_BLOCK_PLUGINS")
    monkeypatch.setenv("RLINF_LOAD_PLUGINS", "")
    assert set(Registry().load(entry_points_=[ep]).plugins) == {"core"}


def test_unknown_class_path_lists_available_names(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  init_args:\n    env:\n      class_path: ReachEnvv\n")
    registry = Registry().load(entry_points_=[])
    with pytest.raises(PluginError, match="Available: .*ReachEnv.*Did you mean 'ReachEnv'"):
        check_config_class_paths(["fit", "--config", str(cfg)], registry)
    with pytest.raises(PluginError, match="rlinf-env-libero"):
        check_config_class_paths(
            ["fit", "--model.init_args.env.class_path=LiberoEnv"], Registry().load(entry_points_=[])
        )


def test_cli_exits_with_one_line_on_unknown_class(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  init_args:\n    policy:\n      class_path: NoSuchPolicy\n")
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(cfg)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rlinf: error: unknown policy class_path 'NoSuchPolicy'")


def test_plugins_command_json():
    out = subprocess.run(
        [sys.executable, "-m", "rlinf_core.cli.main", "plugins", "--json"], capture_output=True, text=True, check=True
    )
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert plugins["core"]["distribution"] == "rlinf-core"
    assert "ReachEnv" in plugins["core"]["registered"]["env"]


def test_fake_plugin_classes_are_gone_after_their_test():
    from rlinf_core.contracts.env import Env

    def all_subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from all_subclasses(sub)

    assert [c.__module__ for c in all_subclasses(Env) if c.__name__ == "ReachEnv"] == ["rlinf_core.builtin.toy_env"]


def test_hooks_are_called_through_pluggy_so_implementations_get_only_the_arguments_they_name(tmp_path, monkeypatch):
    # an implementation that names fewer arguments than the hookspec (as an old plugin would after a
    # hook gained an argument) is called with the ones it names instead of failing
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "pruned_plugin",
        """
        from rlinf_core import hookimpl

        CALLS = []

        @hookimpl
        def register_policies():
            CALLS.append("called")
    """,
    )
    registry = Registry().load(entry_points_=[ep])
    assert registry.plugins["pruned_plugin"].error is None
    assert sys.modules["pruned_plugin"].CALLS == ["called"]


def test_register_refuses_aliases_in_one_line(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "alias_plugin",
        """
        from rlinf_core import hookimpl
        from rlinf_core.builtin.toy_env import ReachEnv

        class AliasedEnv(ReachEnv):
            pass

        @hookimpl
        def register_envs(register):
            register(AliasedEnv, aliases=("Short",))
    """,
    )
    registry = Registry().load(entry_points_=[ep])
    err = registry.plugins["alias_plugin"].error
    assert "aliases" in err and "class name" in err and "\n" not in err
    assert "Short" not in registry.classes and "AliasedEnv" not in registry.classes


def test_plugin_env_var_names_that_match_nothing_fail_in_one_line(tmp_path, monkeypatch, capsys):
    ep = fake_plugin(tmp_path, monkeypatch, "ok_plugin", "x = 1\n")
    monkeypatch.setenv("RLINF_LOAD_PLUGINS", "ok_plugn")
    with pytest.raises(PluginError, match="RLINF_LOAD_PLUGINS names 'ok_plugn', which matches no installed plugin"):
        Registry().load(entry_points_=[ep])
    monkeypatch.delenv("RLINF_LOAD_PLUGINS")
    monkeypatch.setenv("RLINF_BLOCK_PLUGINS", "no-such-dist")
    monkeypatch.setattr("rlinf_core.plugins.manager._REGISTRY", None)  # as in a new process: env vars read again
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(ROOT / "configs/toy/reach_grpo.yaml")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert info.value.code == 2 and len(err) == 1 and "RLINF_BLOCK_PLUGINS names 'no-such-dist'" in err[0]
