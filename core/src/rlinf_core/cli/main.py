"""The ``rlinf`` command: ``rlinf plugins`` / ``configs`` / ``memory`` / ``plot`` / ``coevolve`` plus LightningCLI's ``fit`` /
``validate`` / ... .

Plugins are loaded before the arguments are parsed, so YAML can name registered classes by
their short name (``class_path: MetaWorldEnv``). Output is quiet by default (``--verbose``: Lightning's
tips and known library warnings too); rlinf's progress bar, eval tables and run summary are added
to every trainer. ``--config NAME`` may name a config shipped inside an installed package
(``libero/spatial.yaml``, see :mod:`rlinf_core.cli.configs`) when no such file exists locally.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rlinf_core.cli.errors import run_cli
from rlinf_core.plugins.manager import KINDS, PluginError, Registry, load_plugins

# keys of RLModule / SFTModule / WorldModelTrainer / RewardModelTrainer init args that name a plugin class, and the kind
PLUGIN_KEYS = {
    "env": "env",
    "eval_env": "env",
    "policy": "policy",
    "world_model": "world_model",
    "reward_model": "world_model",
}


def plugins_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlinf plugins", description="List installed rlinf plugins.")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a plugin failed to load")
    opts = parser.parse_args(argv)
    try:
        registry = load_plugins(warn=False)
    except PluginError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        return 2
    infos = list(registry.plugins.values())
    if opts.json:
        print(json.dumps([p.as_dict() for p in infos], indent=2))
    else:
        for p in infos:
            print(f"{p.name}  ({p.distribution} {p.version}, module {p.module})")
            if p.error:
                print(f"  ERROR: {p.error}")
            for kind in KINDS:
                names = [r.name for r in p.registered if r.kind == kind]
                if names:
                    print(f"  {kind}: {', '.join(names)}")
    return 1 if opts.check and registry.errors() else 0


def configs_command(argv: list[str]) -> int:
    from rlinf_core.cli.configs import shipped_configs

    parser = argparse.ArgumentParser(
        prog="rlinf configs", description="List the configs shipped inside installed rlinf packages; pass a "
        "name to `rlinf fit --config NAME`."
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    opts = parser.parse_args(argv)
    found = shipped_configs()
    if opts.json:
        print(json.dumps([{"name": c.name, "package": c.package, "path": str(c.path)} for c in found], indent=2))
        return 0
    width = max((len(c.name) for c in found), default=0)
    for c in found:
        print(f"{c.name:<{width}}  {c.package}")
    return 0


def plot_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlinf plot", description="Write a run's learning-curve PNG from its "
                                     "TensorBoard events.")  # fmt: skip
    parser.add_argument("run_dir", help="the run's log dir (e.g. runs/reach_grpo/version_0)")
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/learning_curve.png)")
    parser.add_argument("--title", default=None, help="figure title (default RUN_DIR)")
    opts = parser.parse_args(argv)
    from rlinf_core.cli.plot import PlotError, plot_learning_curve

    try:
        path = plot_learning_curve(opts.run_dir, opts.out, title=opts.title)
    except PlotError as exc:
        print(f"rlinf plot: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


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


def _walk_class_paths(node: Any, parent_key: str | None, found: list[tuple[str, str]]) -> None:
    if isinstance(node, dict):
        cp = node.get("class_path")
        if isinstance(cp, str) and parent_key in PLUGIN_KEYS:
            found.append((PLUGIN_KEYS[parent_key], cp))
        for key, value in node.items():
            _walk_class_paths(value, key, found)
    elif isinstance(node, list):
        for value in node:
            _walk_class_paths(value, parent_key, found)


def check_config_class_paths(argv: list[str], registry: Registry) -> None:
    """Fail early, in one line, on a ``class_path`` no installed plugin provides."""
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        path = None
        if arg in ("--config", "-c") and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        if path and Path(path).is_file():
            try:
                _walk_class_paths(yaml.safe_load(Path(path).read_text()), None, found)
            except yaml.YAMLError:
                return  # jsonargparse reports YAML errors itself
        elif arg.startswith("--") and ".class_path=" in arg:
            key, value = arg[2:].split("=", 1)
            parent = key.split(".")[-2] if key.count(".") >= 1 else None
            if parent in PLUGIN_KEYS:
                found.append((PLUGIN_KEYS[parent], value))
    for kind, name in found:
        registry.resolve(kind, name)


def _cli_class():
    from lightning.pytorch.cli import LightningCLI

    from lightning.pytorch.callbacks import ModelCheckpoint

    from rlinf_core.run.checkpointing import RLCheckpoint

    class RLinfCLI(LightningCLI):
        """LightningCLI with rlinf's defaults (TensorBoard under ``runs/``, no sanity eval, rlinf's
        progress bar, eval report and run summary, and a ``checkpoint:`` section configuring
        :class:`rlinf_core.run.checkpointing.RLCheckpoint`)."""

        def add_arguments_to_parser(self, parser) -> None:
            parser.add_lightning_class_args(RLCheckpoint, "checkpoint")

        def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
            user = config.get("callbacks") or []
            user = user if isinstance(user, list) else [user]
            own_checkpoint = any(isinstance(c, ModelCheckpoint) for c in user)
            if config.get("enable_checkpointing") is False or own_checkpoint:
                callbacks = [c for c in callbacks if not isinstance(c, RLCheckpoint)]
            return super()._instantiate_trainer(config, callbacks)

        quiet = True

        def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any):
            parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
            if self.quiet and "verbose" in self._subcommand_method_arguments.get(subcommand, {}):
                parser.set_defaults(verbose=False)  # rlinf's eval table replaces Lightning's metric dump
            return parser

        def before_instantiate_classes(self) -> None:
            from rlinf_core.rl.validation import check_number

            trainer = self.config[self.subcommand].get("trainer") if self.subcommand else self.config.get("trainer")
            if trainer is not None:
                check_number("trainer.check_val_every_n_epoch", trainer.get("check_val_every_n_epoch"), low=1,
                             optional=True, hint="null: never evaluate")

        def _parse_ckpt_path(self) -> None:
            # first verify --ckpt_path (LightningCLI reads it here for hyperparameters): a directory resumes from
            # its newest good checkpoint, a bad file fails in one line before anything (a run dir) is written
            from rlinf_core.run.checkpoint_files import resolve_resume_path

            sub = self.config.get("subcommand")
            if sub and self.config[sub].get("ckpt_path"):
                self.config[sub]["ckpt_path"] = resolve_resume_path(self.config[sub]["ckpt_path"])
            super()._parse_ckpt_path()

        def before_fit(self) -> None:
            from rlinf_core.run.run_dirs import check_outputs

            check_outputs(self.trainer, self.model)
            check = getattr(self.model, "check_world_size", None)
            if check is not None:  # before the launcher starts ranks and before a run directory exists
                check(self.trainer.world_size)

        def instantiate_trainer(self, **kwargs: Any):
            config = self._get(self.config_init, "trainer", default={})
            given = config.get("callbacks") or []
            given = list(given) if isinstance(given, list) else [given]
            kwargs["callbacks"] = given + default_callbacks(given, config.get("enable_progress_bar") is not False)
            trainer = super().instantiate_trainer(**kwargs)
            # An RL step is an epoch and eval is sparse: a user's ModelCheckpoint also saves at every
            # epoch end (not only after validation) and links last.ckpt, unless configured otherwise.
            for cb in trainer.checkpoint_callbacks:
                if getattr(cb, "_save_on_train_epoch_end", False) is None:
                    cb._save_on_train_epoch_end = True
                if cb.save_last is None:
                    cb.save_last = "link"
            return trainer

    return RLinfCLI


def default_callbacks(given: list, progress_bar: bool) -> list:
    """rlinf's console callbacks that the user's callbacks do not already provide."""
    from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

    from rlinf_core.callbacks.eval_report import EvalReport
    from rlinf_core.callbacks.progress import RLProgressBar
    from rlinf_core.callbacks.summary import RunSummary

    out = []
    if progress_bar and not any(isinstance(cb, ProgressBar) for cb in given):
        out.append(RLProgressBar())
    for cls in (EvalReport, RunSummary):
        if not any(isinstance(cb, cls) for cb in given):
            out.append(cls())
    return out


def trainer_defaults(quiet: bool = False) -> dict[str, Any]:
    return {
        "enable_model_summary": not quiet,  # quiet: rlinf's progress bar prints a one-line header instead
        "logger": {
            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": "runs", "name": "rlinf"},
        },
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "use_distributed_sampler": False,
        "reload_dataloaders_every_n_epochs": 0,
    }


def main(args: list[str] | None = None) -> int | None:
    from rlinf_core.cli.configs import resolve_config_args

    argv = resolve_config_args(list(sys.argv[1:] if args is None else args))
    if argv and argv[0] == "plugins":
        return plugins_command(argv[1:])
    if argv and argv[0] == "configs":
        return configs_command(argv[1:])
    if argv and argv[0] == "memory":
        from rlinf_core.cli.memory import memory_command

        return memory_command(argv[1:])
    if argv and argv[0] == "plot":
        return plot_command(argv[1:])
    if argv and argv[0] == "serve":
        from rlinf_core.serve.command import serve_command

        return serve_command(argv[1:])
    if argv and argv[0] == "coevolve":
        from rlinf_core.cli.coevolve import coevolve_command

        return coevolve_command(argv[1:])
    if argv and argv[0] == "wm-score":
        from rlinf_core.cli.wm_score import wm_score_command

        return wm_score_command(argv[1:])
    argv, verbose = _pop_verbose(argv)
    if not verbose:
        from rlinf_core.cli.quiet import install_quiet_filters

        install_quiet_filters()
    try:
        registry = load_plugins()
        check_config_class_paths(argv, registry)
    except PluginError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import lightning.pytorch as pl

    import rlinf_core.rl.algorithms  # noqa: F401 - makes PPO / GRPO short names resolvable
    import rlinf_core.rl.module  # noqa: F401 - makes RLModule resolvable

    try:
        import rlinf_core.supervised.sft  # noqa: F401 - makes SFTModule resolvable
    except ImportError:
        pass
    import rlinf_core.callbacks.recorder  # noqa: F401 - makes the RolloutRecorder callback resolvable
    import rlinf_core.supervised.world_model  # noqa: F401 - makes WorldModelTrainer / RewardModelTrainer resolvable
    cli_class = _cli_class()
    cli_class.quiet = not verbose
    strict = {"exit_on_error": False, "allow_abbrev": False}  # errors come back to run_cli; no flag abbreviations
    parser_kwargs = {**strict, **{cmd: dict(strict) for cmd in ("fit", "validate", "test", "predict")}}
    run_cli(lambda: cli_class(
        pl.LightningModule,
        None,
        subclass_mode_model=True,
        args=argv,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        trainer_defaults=trainer_defaults(quiet=not verbose),
        parser_kwargs=parser_kwargs,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
