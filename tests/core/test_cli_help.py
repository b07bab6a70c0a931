"""``rlinf --help`` lists every command in one line each; "did you mean" for misspelled commands and keys."""

import pytest

from rlinf_core.cli.commands import BUILTIN_COMMANDS, builtin_commands
from rlinf_core.cli.main import main
from rlinf_core.cli.suggest import closest_key


def test_help_lists_every_command_with_a_whole_one_line_description(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Lightning Trainer command line tool" not in out
    listed = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    names = {c.name for c in builtin_commands()}
    assert {"fit", "validate", "test", "predict", "plugins", "configs", "plot", "memory", "coevolve"} <= names
    for cmd in builtin_commands():
        line = listed[cmd.name]
        assert cmd.help in line and cmd.help.endswith(".") and len(line) <= 120, line  # whole sentence, one line
    assert main(["help"]) == 0 and capsys.readouterr().out == out


def test_serve_is_listed_exactly_when_its_command_exists(monkeypatch):
    serve = next(c for c in BUILTIN_COMMANDS if c.name == "serve")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == serve.target.split(":")[0]
                        else real(name, *a))  # fmt: skip
    assert "serve" not in {c.name for c in builtin_commands()}


def test_misspelled_command_suggests_the_closest_in_one_line(capsys):
    assert main(["fitt", "--config", "x.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlinf: error: unknown command 'fitt'. Did you mean 'fit'?"), err
    assert main(["plugin"]) == 2
    assert "Did you mean 'plugins'?" in capsys.readouterr().err


def test_plugins_says_built_in_for_the_core_plugin(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("core  (rlinf-core") and "built in)" in out.splitlines()[0]
    assert "rlinf.testing.plugin" not in out and "rlinf_core.builtin.plugin" not in out


@pytest.mark.parametrize("key, expected", [
    ("optim.learning_rate", "optim.lr"), ("optim.lrr", "optim.lr"), ("optim.wd", "optim.weight_decay"),
    ("global_batchsize", "global_batch_size"), ("optm.lr", "optim.lr"), ("nothing_like_it", None),
])  # fmt: skip
def test_closest_key(key, expected):
    accepted = ["optim.lr", "optim.value_lr", "optim.weight_decay", "rollout.rollout_epoch", "global_batch_size"]
    assert closest_key(key, accepted) == expected


@pytest.mark.parametrize("arg, hint", [
    ("--model.init_args.optim.learning_rate=0.1", "Did you mean --model.init_args.optim.lr?"),
    ("--trainer.max_epoch=3", "Did you mean --trainer.max_epochs?"),
    ("--model.init_args.env.init_args.num_env=4", "Did you mean --model.init_args.env.init_args.num_envs?"),
])  # fmt: skip
def test_misspelled_config_keys_suggest_the_accepted_key(capsys, arg, hint):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", "toy/reach_grpo.yaml", arg])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlinf: error: ") and err[0].endswith(hint), err


def test_help_into_a_closed_pipe_is_not_an_error():
    import subprocess
    import sys

    # `rlinf plugins | head -1`: the reader leaves after one line; no BrokenPipeError traceback, exit 0
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from rlinf_core.cli.main import main; sys.exit(main(['--help']))"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err


def test_help_examples_name_the_run_directory_their_config_writes(capsys):
    """An example's ``--ckpt_path`` is a ``version_N`` under the config's own logger directory."""
    import re

    import yaml

    from rlinf_core.cli.configs import resolve_config_args

    assert main(["--help"]) == 0
    examples = [ln.split("#")[0].split() for ln in capsys.readouterr().out.splitlines() if "--ckpt_path" in ln]
    assert examples
    for words in examples:
        config = resolve_config_args(["--config", words[words.index("--config") + 1]])[1]
        logger = yaml.safe_load(open(config))["trainer"]["logger"]["init_args"]
        run_root = f"{logger['save_dir']}/{logger['name']}/"
        ckpt = words[words.index("--ckpt_path") + 1]
        assert ckpt.startswith(run_root) and re.match(r"version_\d+", ckpt[len(run_root) :]), (ckpt, run_root)
