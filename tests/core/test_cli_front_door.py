"""The fast front door: lazy plugin registration, plugin commands, and no heavy imports on the listing paths."""

import gc
import json
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rlinf_core.cli.main import main
from rlinf_core.plugins.manager import PluginError, Registry

HEAVY = ("lightning", "transformers", "diffusers")


@pytest.fixture(autouse=True)
def forget_fake_plugins():
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.endswith("_plugin") or name.startswith("lazy_cls"):
            del sys.modules[name]
    gc.collect()


def fake_plugin(tmp_path, monkeypatch, name, source, files=None):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    for file, text in (files or {}).items():
        (tmp_path / file).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return EntryPoint(name=name, value=name, group="rlinf")


@pytest.mark.parametrize("args", [["--help"], ["plugins"], ["configs"], ["plugins", "--json"]])
def test_listing_commands_import_no_lightning_transformers_or_diffusers(args):
    probe = textwrap.dedent(f"""
        import contextlib, io, sys
        from rlinf_core.cli.main import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main({args!r})
        print(code, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "0" and out.strip().endswith("[]"), out


def test_registering_a_dotted_path_imports_nothing_until_used(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "lazy_plugin",
        """
        from rlinf_core import hookimpl

        @hookimpl
        def register_envs(register):
            register("lazy_cls_env:LazyEnv")
            register("lazy_cls_missing:GoneEnv")
    """,
        files={
            "lazy_cls_env.py": """
        from rlinf_core.builtin.toy_env import ReachEnv

        class LazyEnv(ReachEnv):
            pass
    """
        },
    )
    registry = Registry().load(entry_points_=[ep])
    assert {"LazyEnv", "GoneEnv"} <= set(registry.names("env")) and "lazy_cls_env" not in sys.modules
    assert registry.classes["LazyEnv"].class_path == "lazy_cls_env.LazyEnv"
    assert registry.resolve("env", "LazyEnv").__name__ == "LazyEnv" and "lazy_cls_env" in sys.modules
    with pytest.raises(PluginError, match="'lazy_cls_missing:GoneEnv', which failed to import: ModuleNotFoundError"):
        registry.resolve("env", "GoneEnv")
    failed = registry.import_classes(warn=False)
    assert len(failed) == 1 and "GoneEnv" not in registry.names("env") and registry.plugins["lazy_plugin"].error


def test_lazy_class_with_the_wrong_base_is_rejected_on_use(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "wrongbase_plugin",
        """
        from rlinf_core import hookimpl

        @hookimpl
        def register_policies(register):
            register("lazy_cls_wrong:NotAPolicy")
            register("not a path")
    """,
        files={"lazy_cls_wrong.py": "class NotAPolicy:\n    pass\n"},
    )
    registry = Registry().load(entry_points_=[ep])
    assert "expected a class or a dotted path 'package.module:ClassName'" in registry.plugins["wrongbase_plugin"].error


def test_plugin_commands_run_as_rlinf_subcommands(tmp_path, monkeypatch, capsys):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "tool_plugin",
        """
        from rlinf_core import hookimpl

        def hello(argv):
            print("hello", *argv)
            return 3

        @hookimpl
        def register_commands(register):
            register("hello-tool", "tool_plugin:hello", "Say hello (a test command).")
    """,
    )
    registry = Registry().load(entry_points_=[ep])
    assert registry.commands["hello-tool"].distribution == "unknown"
    monkeypatch.setattr(sys.modules["rlinf_core.cli.main"], "load_plugins", lambda **_: registry)
    assert main(["hello-tool", "a", "b"]) == 3
    assert capsys.readouterr().out == "hello a b\n"
    main(["--help"])
    help_text = capsys.readouterr().out
    assert "commands added by plugins:" in help_text and "hello-tool" in help_text and "Say hello" in help_text


def test_a_plugin_cannot_take_an_rlinf_command_name(tmp_path, monkeypatch):
    ep = fake_plugin(
        tmp_path,
        monkeypatch,
        "greedy_plugin",
        """
        from rlinf_core import hookimpl

        @hookimpl
        def register_commands(register):
            register("fit", "greedy_plugin:x", "mine")
    """,
    )
    err = Registry().load(entry_points_=[ep]).plugins["greedy_plugin"].error
    assert "registered the command 'fit', which is one of rlinf's own commands" in err


def test_every_builtin_command_name_is_reserved_from_plugins():
    from rlinf_core.cli.commands import BUILTIN_COMMANDS
    from rlinf_core.plugins.entries import RESERVED_COMMANDS

    assert {c.name for c in BUILTIN_COMMANDS} | {"help"} <= RESERVED_COMMANDS


def test_first_party_tools_are_rlinf_commands():
    registry = Registry().load()
    expected = {"openvla-make-tiny", "openpi-make-tiny", "opensora-make-tiny", "wan-make-tiny", "metaworld-collect"}
    assert expected <= set(registry.commands)
    for command in registry.commands.values():
        assert callable(command.load()), command.name


def test_openvla_make_tiny_runs_through_rlinf(tmp_path):
    out = tmp_path / "tiny"
    assert main(["openvla-make-tiny", str(out)]) == 0
    assert (out / "config.json").is_file()


def test_plugins_json_lists_commands_and_marks_the_builtin_plugin(capsys):
    assert main(["plugins", "--json"]) == 0
    plugins = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert plugins["core"]["builtin"] and "ReachEnv" in plugins["core"]["registered"]["env"]
    assert "openvla-make-tiny" in plugins["openvla"]["commands"]


def test_a_run_builds_the_parser_of_its_own_subcommand_only(capsys, monkeypatch):
    """Building the three unused subcommands' parsers was a third of a bad config's time to its error line."""
    from rlinf_core.cli.lightning import RLinfCLI

    built = []  # add_arguments_to_parser runs once per subcommand parser
    original = RLinfCLI.add_arguments_to_parser
    monkeypatch.setattr(RLinfCLI, "add_arguments_to_parser", lambda self, p: built.append(1) or original(self, p))
    config = str(Path(__file__).resolve().parents[2] / "configs" / "toy" / "reach_grpo.yaml")
    with pytest.raises(SystemExit):
        main(["validate", "--config", config, "--model.init_args.bogus", "1"])
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("rlinf: error:")
    assert len(built) == 1
    assert RLinfCLI.only is None and set(RLinfCLI.subcommands()) == {"fit", "validate", "test", "predict"}
