"""The ``rlinf`` command: its own commands (``rlinf --help`` lists them, :mod:`rlinf_core.cli.commands`) plus
LightningCLI's ``fit`` / ``validate`` / ``test`` / ``predict``.

Plugins are loaded before the arguments are parsed, so YAML can name registered classes by their short name
(``class_path: MetaWorldEnv``). Output is quiet by default (``--verbose``: Lightning's tips and known library
warnings too); the training commands run :class:`rlinf_core.cli.lightning.RLinfCLI`, which adds rlinf's progress
bar, eval tables and run summary to every trainer. ``--config NAME`` may name a config shipped inside an installed
package (``libero/spatial.yaml``, see :mod:`rlinf_core.cli.configs`) when no such file exists locally.
"""

from __future__ import annotations

import importlib
import os
import sys

from rlinf_core.cli.class_paths import check_config_class_paths
from rlinf_core.cli.error_report import run_cli
from rlinf_core.plugins.manager import PluginError, load_plugins


def _dispatch(argv: list[str]) -> int | None:
    """Run ``rlinf --help`` and every non-Lightning command (built-in or a plugin's); ``None`` for fit / validate /
    test / predict, which go to LightningCLI."""

    from rlinf_core.cli.commands import (
        LIGHTNING_COMMANDS,
        builtin_commands,
        help_text,
        run_plugin_command,
        unknown_command_message,
    )

    words = [a for a in argv if a != "--verbose"]
    if not words or words[0] in ("-h", "--help", "help"):
        registry = load_plugins(warn=False)
        print(help_text(registry.commands, [p.name for p in registry.plugins.values() if p.error]))
        return 0 if words else 2
    name = words[0]
    if name in LIGHTNING_COMMANDS or name.startswith("-"):
        return None
    builtin = {c.name: c for c in builtin_commands()}
    if name in builtin:
        module, _, function = builtin[name].target.partition(":")
        run = getattr(importlib.import_module(module), function)
        rest = argv[argv.index(name) + 1 :]
        return run(rest)
    registry = load_plugins(warn=False)
    if name in registry.commands:
        return run_plugin_command(name, argv[argv.index(name) + 1 :], registry)
    print(unknown_command_message(name, registry.commands), file=sys.stderr)
    return 2


def _pop_verbose(argv: list[str]) -> tuple[list[str], bool]:
    """Remove rlinf's bare ``--verbose`` flag (``validate --verbose=false`` stays Lightning's)."""
    bools = {"true", "false", "0", "1", "yes", "no"}
    out, verbose = [], False
    for i, arg in enumerate(argv):
        nxt = argv[i + 1].lower() if i + 1 < len(argv) else ""
        if arg == "--verbose" and nxt not in bools:
            verbose = True
        else:
            out.append(arg)
    return out, verbose


def main(args: list[str] | None = None) -> int | None:
    from rlinf_core.cli.configs import resolve_config_args

    argv = resolve_config_args(list(sys.argv[1:] if args is None else args))
    try:
        code = _dispatch(argv)
    except BrokenPipeError:  # `rlinf plugins | head`: the reader has gone, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
    if code is not None:
        return code
    argv, verbose = _pop_verbose(argv)
    if not verbose:
        from rlinf_core.cli.quiet import install_quiet_filters

        install_quiet_filters()
    from rlinf_core.cli.checks import _config_paths, check_config_files
    from rlinf_core.foundation.config_paths import set_config_files

    set_config_files(_config_paths(argv))  # relative data paths are looked for beside the config files too
    run_cli(lambda: check_config_files(argv))  # malformed files and YAML tags, before anything is constructed
    try:
        registry = load_plugins()
        check_config_class_paths(argv, registry)
        registry.import_classes()  # LightningCLI resolves YAML short names among the imported classes
    except PluginError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import lightning.pytorch as pl

    import rlinf_core.callbacks.recorder  # noqa: F401 - makes the RolloutRecorder callback resolvable
    import rlinf_core.rl.algorithms  # noqa: F401 - makes PPO / GRPO short names resolvable
    import rlinf_core.rl.module  # noqa: F401 - makes RLModule resolvable
    import rlinf_core.supervised.sft  # noqa: F401 - makes SFTModule resolvable
    import rlinf_core.supervised.world_model_trainers  # noqa: F401 - makes WorldModelTrainer / RewardModelTrainer resolvable
    from rlinf_core.cli.commands import LIGHTNING_COMMANDS
    from rlinf_core.cli.lightning import RLinfCLI, trainer_defaults

    # only the run's own subcommand parser is built: the other three were a third of a bad config's time to its error
    only = argv[0] if argv and argv[0] in LIGHTNING_COMMANDS else None
    cli_class = RLinfCLI.for_run(quiet=not verbose, only=only)
    strict = {"exit_on_error": False, "allow_abbrev": False}  # errors come back to run_cli; no flag abbreviations
    parser_kwargs = {**strict, **{cmd: dict(strict) for cmd in cli_class.subcommands()}}
    from rlinf_core.callbacks.startup import hold_startup_lines, release_startup_lines
    from rlinf_core.cli.suggest import with_key_suggestions

    hold_startup_lines()  # Lightning's `Seed set to` / device lines come after the run's first line (its directory)
    try:
        run_cli(
            with_key_suggestions(
                lambda: cli_class(
                    pl.LightningModule,
                    None,
                    subclass_mode_model=True,
                    args=argv,
                    save_config_kwargs={"overwrite": True},
                    seed_everything_default=0,
                    trainer_defaults=trainer_defaults(quiet=not verbose),
                    parser_kwargs=parser_kwargs,
                ),
                argv,
            )
        )
    except BaseException:  # an error (or a finished run) before the header: its message is the last word
        release_startup_lines(drop=True)
        raise
    release_startup_lines()  # a run without rlinf's progress bar: they come at its end
    return 0


if __name__ == "__main__":
    sys.exit(main())
