"""The ``rlinf`` command: ``rlinf plugins`` plus LightningCLI's ``fit`` / ``validate`` / ... .

Plugins are loaded before the arguments are parsed, so YAML can name registered classes by
their short name (``class_path: MetaWorldEnv``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rlinf.errors import run_cli
from rlinf.plugins.manager import KINDS, PluginError, Registry, load_plugins

# keys of RLModule / SFTModule init args that name a plugin class, and the kind they take
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

    from rlinf.checkpointing import RLCheckpoint

    class RLinfCLI(LightningCLI):
        """LightningCLI with rlinf's defaults (TensorBoard under ``runs/``, no sanity eval, and a
        ``checkpoint:`` section configuring :class:`rlinf.checkpointing.RLCheckpoint`)."""

        def add_arguments_to_parser(self, parser) -> None:
            parser.add_lightning_class_args(RLCheckpoint, "checkpoint")

        def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
            user = config.get("callbacks") or []
            user = user if isinstance(user, list) else [user]
            own_checkpoint = any(isinstance(c, ModelCheckpoint) for c in user)
            if config.get("enable_checkpointing") is False or own_checkpoint:
                callbacks = [c for c in callbacks if not isinstance(c, RLCheckpoint)]
            return super()._instantiate_trainer(config, callbacks)

        def before_instantiate_classes(self) -> None:
            from rlinf.validation import check_number

            trainer = self.config[self.subcommand].get("trainer") if self.subcommand else self.config.get("trainer")
            if trainer is not None:
                check_number("trainer.check_val_every_n_epoch", trainer.get("check_val_every_n_epoch"), low=1,
                             optional=True, hint="null: never evaluate")

        def _parse_ckpt_path(self) -> None:
            # first verify --ckpt_path (LightningCLI reads it here for hyperparameters): a directory resumes from
            # its newest good checkpoint, a bad file fails in one line before anything (a run dir) is written
            from rlinf.checkpoint_io import resolve_resume_path

            sub = self.config.get("subcommand")
            if sub and self.config[sub].get("ckpt_path"):
                self.config[sub]["ckpt_path"] = resolve_resume_path(self.config[sub]["ckpt_path"])
            super()._parse_ckpt_path()

        def before_fit(self) -> None:
            from rlinf.run_dirs import check_outputs

            check_outputs(self.trainer, self.model)

        def instantiate_trainer(self, **kwargs: Any):
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


def trainer_defaults() -> dict[str, Any]:
    return {
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
    argv = list(sys.argv[1:] if args is None else args)
    if argv and argv[0] == "plugins":
        return plugins_command(argv[1:])
    try:
        registry = load_plugins()
        check_config_class_paths(argv, registry)
    except PluginError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import lightning.pytorch as pl

    import rlinf.algorithms  # noqa: F401 - makes PPO / GRPO short names resolvable
    import rlinf.module  # noqa: F401 - makes RLModule resolvable

    try:
        import rlinf.sft  # noqa: F401 - makes SFTModule resolvable
    except ImportError:
        pass
    strict = {"exit_on_error": False, "allow_abbrev": False}  # errors come back to run_cli; no flag abbreviations
    parser_kwargs = {**strict, **{cmd: dict(strict) for cmd in ("fit", "validate", "test", "predict")}}
    run_cli(lambda: _cli_class()(
        pl.LightningModule,
        None,
        subclass_mode_model=True,
        args=argv,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        trainer_defaults=trainer_defaults(),
        parser_kwargs=parser_kwargs,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
