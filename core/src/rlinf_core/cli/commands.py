"""The ``rlinf`` front door: one table of commands, the help that lists them, and plugin commands.

Nothing here imports Lightning, torch or a plugin's classes: ``rlinf --help``, ``rlinf plugins`` and
``rlinf configs`` answer from this table and the plugins' lazy registrations (``benchmarks/cli_startup.py``).
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from dataclasses import dataclass

#: LightningCLI's subcommands: they run a LightningModule from a config (``rlinf fit --config x.yaml``)
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


@dataclass(frozen=True)
class BuiltinCommand:
    name: str
    help: str
    target: str | None = None  # "module:function" taking argv; None: a LightningCLI subcommand


BUILTIN_COMMANDS = (
    BuiltinCommand("fit", "Train a model from a config: RL (RLModule), SFT, or a world / reward model."),
    BuiltinCommand("validate", "Evaluate a policy (e.g. a checkpoint) on the config's eval env; no training."),
    BuiltinCommand("test", "Run the config's test loop (LightningModules that define one)."),
    BuiltinCommand("predict", "Run the config's predict loop (LightningModules that define one)."),
    BuiltinCommand(
        "plugins",
        "List installed plugins and the envs, policies, world models and commands they add.",
        "rlinf_core.cli.plugins:plugins_command",
    ),
    BuiltinCommand(
        "configs",
        "List the configs shipped inside installed packages (for `--config NAME`).",
        "rlinf_core.cli.configs:configs_command",
    ),
    BuiltinCommand(
        "plot", "Draw a run's learning curves as a PNG from its TensorBoard events.", "rlinf_core.cli.plot:plot_command"
    ),
    BuiltinCommand(
        "memory",
        "Estimate a config's GPU memory per rank, without loading weights.",
        "rlinf_core.cli.memory:memory_command",
    ),
    BuiltinCommand(
        "coevolve",
        "Run (or continue) a co-evolution loop: collect, world model, reward model, RL.",
        "rlinf_core.cli.coevolve:coevolve_command",
    ),
    BuiltinCommand(
        "wm-score",
        "Score a world model: action response, reward on imagined frames, policy ranking.",
        "rlinf_core.cli.wm_score:wm_score_command",
    ),
    BuiltinCommand(
        "new",
        "Start a plugin: write an env, policy or world-model package that passes its tests.",
        "rlinf_core.cli.new:new_command",
    ),
    BuiltinCommand(
        "serve",
        "Serve a trained policy over openpi's websocket or OpenVLA's REST protocol (docs/serving.md).",
        "rlinf_core.serve.command:serve_command",
    ),
)


def builtin_commands() -> list[BuiltinCommand]:
    """The built-in commands whose module is installed."""
    out = []
    for cmd in BUILTIN_COMMANDS:
        if cmd.target is not None and importlib.util.find_spec(cmd.target.split(":")[0]) is None:
            continue
        out.append(cmd)
    return out


def help_text(plugin_commands: dict | None = None, errors: list[str] | None = None) -> str:
    """``rlinf --help``: every command with its one-line description."""
    rows = [(c.name, c.help) for c in builtin_commands()]
    extra = sorted((name, f"{c.help} [{c.distribution}]") for name, c in (plugin_commands or {}).items())
    width = max(len(n) for n, _ in rows + extra)
    lines = [
        "usage: rlinf COMMAND [ARGS]   (rlinf COMMAND --help for a command's options)",
        "",
        "rlinf trains Vision-Language-Action policies with RL in simulators and learned world models.",
        "",
        "commands:",
        *(f"  {n:<{width}}  {h}" for n, h in rows),
    ]
    if extra:
        lines += ["", "commands added by plugins:", *(f"  {n:<{width}}  {h}" for n, h in extra)]
    lines += [
        "",
        "options:",
        "  -h, --help  show this message and exit",
        "  --verbose   (before or after the command) show Lightning's tips and known library warnings",
        "",
        "examples:",
        "  rlinf fit --config toy/reach_grpo.yaml",
        "  rlinf validate --config toy/reach_grpo.yaml --ckpt_path runs/reach_grpo/version_0   # its first run",
        "  rlinf fit --config toy/reach_grpo.yaml --print_config   # the full config with every default",
    ]
    if errors:
        lines += ["", "plugins that failed to load (`rlinf plugins` for details): " + "; ".join(errors)]
    return "\n".join(lines)


def unknown_command_message(name: str, plugin_commands: dict | None = None) -> str:
    """One line for ``rlinf fitt``: the closest commands and where the list is."""
    names = [c.name for c in builtin_commands()] + sorted(plugin_commands or {})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"rlinf: error: unknown command {name!r}.{hint} Commands: {', '.join(names)} (rlinf --help)."


def run_plugin_command(name: str, argv: list[str], registry) -> int:
    """Run a plugin's ``rlinf NAME``; a failure to import it is one line (exit 2)."""
    from rlinf_core.plugins.entries import PluginError

    command = registry.commands[name]
    try:
        function = command.load()
    except PluginError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        return 2
    code = function(argv)
    return 0 if code is None else int(code)
