"""The LightningCLI behind ``rlinf fit`` / ``validate`` / ...: rlinf's defaults on LightningCLI's public hooks only.

Defaults: TensorBoard under ``runs/``, no sanity eval, rlinf's progress bar, eval report and run summary, a
``checkpoint:`` section configuring :class:`rlinf_core.run.checkpointing.RLCheckpoint`, a ``memory:`` section read by
``rlinf memory`` (:class:`rlinf_core.memory.estimate.MemoryTarget`), and ``--ckpt_path DIR`` resuming from the
newest good checkpoint in ``DIR``. Imports Lightning: only the training commands load this module.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from rlinf_core.cli.yaml_keys import yaml_keys
from rlinf_core.foundation.checks import ConfigValueError, check_number
from rlinf_core.memory.estimate import MemoryTarget
from rlinf_core.run.checkpointing import RLCheckpoint


class RLinfCLI(LightningCLI):
    """LightningCLI with rlinf's defaults (see the module docstring)."""

    quiet = True  # rlinf's eval table replaces Lightning's metric dump (``rlinf --verbose``: both)
    #: the one subcommand a run builds a parser for (``rlinf fit ...``: fit); None: all four
    only: str | None = None

    @classmethod
    def for_run(cls, *, quiet: bool, only: str | None) -> type[RLinfCLI]:
        """A subclass with one run's settings, so that no run leaves state on the class."""
        return type(cls.__name__, (cls,), {"quiet": quiet, "only": only})

    @classmethod
    def subcommands(cls) -> dict[str, set[str]]:
        every = LightningCLI.subcommands()
        return {cls.only: every[cls.only]} if cls.only in every else every

    def add_arguments_to_parser(self, parser) -> None:
        # a plain class group (not add_lightning_class_args): instantiate_trainer decides whether it joins the
        # trainer's callbacks (not when checkpointing is off or the user configures a ModelCheckpoint)
        parser.add_class_arguments(RLCheckpoint, "checkpoint", fail_untyped=False, sub_configs=True)
        parser.add_class_arguments(MemoryTarget, "memory", fail_untyped=False)

    def parse_arguments(self, parser, args) -> None:
        if self.quiet and isinstance(args, list):
            args = _quiet_verbose_default(args, self.subcommands())
        super().parse_arguments(parser, args)
        # verify --ckpt_path before LightningCLI reads hyperparameters from it: a directory resumes from its newest
        # good checkpoint, a bad file fails in one line before anything (a run dir) is written
        from rlinf_core.run.checkpoint_files import load_checkpoint_file, resolve_resume_path

        sub = self.config.get("subcommand")
        if sub and self.config[sub].get("ckpt_path"):
            self.config[sub]["ckpt_path"] = ckpt = resolve_resume_path(self.config[sub]["ckpt_path"])
            if ckpt and Path(ckpt).is_file():  # one line for a file that unpickles badly, before LightningCLI reads it
                load_checkpoint_file(ckpt, mmap=True)

    def before_instantiate_classes(self) -> None:

        config = self.config[self.subcommand] if self.subcommand else self.config
        trainer = config.get("trainer")
        if trainer is not None:
            check_number(
                "trainer.check_val_every_n_epoch",
                trainer.get("check_val_every_n_epoch"),
                low=1,
                optional=True,
                hint="null: never evaluate",
            )
        from rlinf_core.cli.checks import check_config
        from rlinf_core.foundation.config_paths import absolute_data_paths

        check_config(config, self.subcommand)
        absolute_data_paths(config)  # the saved config.yaml names the data found beside a config file
        if trainer is None:
            return
        # An RL step is an epoch and eval is sparse: a user's ModelCheckpoint also saves at every epoch end (not
        # only after validation) and links last.ckpt, unless configured otherwise.
        for spec in _as_list(trainer.get("callbacks")):
            if isinstance(spec, Namespace) and _is_model_checkpoint(spec.get("class_path")):
                init = spec.get("init_args")
                if init is None:
                    spec["init_args"] = init = Namespace()
                if init.get("save_on_train_epoch_end") is None:
                    init["save_on_train_epoch_end"] = True
                if init.get("save_last") is None:
                    init["save_last"] = "link"

    def instantiate_classes(self) -> None:
        """LightningCLI's, with a value a class refuses named by its YAML key (the class names it as it knows it)."""
        try:
            super().instantiate_classes()
        except Exception as exc:
            refused = _config_value_error(exc)
            if refused is not None:
                config = self.config[self.subcommand] if self.subcommand else self.config
                refused.rename(yaml_keys(config.as_dict(), refused.values))
            raise

    def before_fit(self) -> None:
        from rlinf_core.cli.world_size import world_size_note
        from rlinf_core.run.run_dirs import check_outputs

        check_outputs(self.trainer, self.model)
        check = getattr(self.model, "check_world_size", None)
        if check is not None:  # before the launcher starts ranks and before a run directory exists
            check(self.trainer.world_size)
        from rlinf_core.cli.checks import check_before_fit

        check_before_fit(
            self.trainer,
            self.model,
            (self.config[self.subcommand] if self.subcommand else self.config).get("ckpt_path"),
        )
        target = (self.config_init[self.subcommand] if self.subcommand else self.config_init).get("memory")
        samples = getattr(self.model, "samples_per_rank", None)
        if isinstance(target, MemoryTarget) and samples is not None and rank_zero_only.rank == 0:
            note = world_size_note(
                target.world_size,
                self.trainer.world_size,
                self.model.env.num_envs,
                samples(),
                self.model.global_batch_size,
            )
            if note:
                print(note, file=sys.stderr, flush=True)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer_config = config.get("trainer") or {}
        given = _as_list(trainer_config.get("callbacks"))
        own = (
            []
            if trainer_config.get("enable_checkpointing") is False or any(isinstance(c, ModelCheckpoint) for c in given)
            else [config["checkpoint"]]
        )
        kwargs["callbacks"] = given + default_callbacks(given, trainer_config.get("enable_progress_bar") is not False)
        kwargs["callbacks"] += own
        return super().instantiate_trainer(**kwargs)


def _config_value_error(exc: BaseException) -> ConfigValueError | None:
    """The :class:`ConfigValueError` in ``exc``'s chain (jsonargparse wraps a class's error in its own)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ConfigValueError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _as_list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, list) else [value]


def _is_model_checkpoint(class_path: Any) -> bool:
    if not isinstance(class_path, str):
        return False
    from jsonargparse.typing import import_object  # noqa: PLC0415

    try:
        cls = import_object(class_path)
    except Exception:  # jsonargparse reports unknown classes itself
        return False
    return isinstance(cls, type) and issubclass(cls, ModelCheckpoint)


def _quiet_verbose_default(args: list[str], subcommands: dict[str, Any]) -> list[str]:
    """``--verbose=false`` right after a ``validate`` / ``test`` subcommand: a default that anything the user
    gives later (a flag, a config file) overrides. (LightningCLI has no public hook for a subcommand argument's
    default: the argument is added after ``add_arguments_to_parser``.)"""
    for i, arg in enumerate(args):
        if arg in subcommands:
            if "verbose" in inspect.signature(getattr(Trainer, arg)).parameters:
                return [*args[: i + 1], "--verbose=false", *args[i + 1 :]]
            break
    return args


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
