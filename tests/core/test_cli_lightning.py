"""RLinfCLI's defaults, set through LightningCLI's public hooks only."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from rlinf_core.cli.lightning import RLinfCLI, _quiet_verbose_default, trainer_defaults
from rlinf_core.run.checkpointing import RLCheckpoint

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--config",
    str(ROOT / "configs/toy/reach_grpo.yaml"),
    "--trainer.logger=false",
    "--model.init_args.env.init_args.num_envs=8",
]


def _cli(*args: str) -> RLinfCLI:
    import rlinf_core.rl.algorithms  # noqa: F401 - short names
    import rlinf_core.rl.module  # noqa: F401
    from rlinf_core.plugins.manager import load_plugins

    load_plugins()
    return RLinfCLI(
        pl.LightningModule,
        None,
        subclass_mode_model=True,
        run=False,
        args=[*SMALL, *args],
        seed_everything_default=0,
        trainer_defaults=trainer_defaults(quiet=True),
    )


def test_validate_and_test_default_to_quiet_and_the_user_overrides_it():
    subs = RLinfCLI.subcommands()
    assert _quiet_verbose_default(["validate", "--config", "a.yaml"], subs) == [
        "validate",
        "--verbose=false",
        "--config",
        "a.yaml",
    ]  # later flags and config files win over it
    assert _quiet_verbose_default(["test", "--verbose=true"], subs) == ["test", "--verbose=false", "--verbose=true"]
    assert _quiet_verbose_default(["fit", "--config", "a.yaml"], subs) == ["fit", "--config", "a.yaml"]
    assert _quiet_verbose_default(["predict"], subs) == ["predict"]  # Trainer.predict has no verbose


def test_the_checkpoint_section_is_the_one_checkpoint_callback(tmp_path):
    trainer = _cli(f"--trainer.default_root_dir={tmp_path}").trainer
    assert [type(cb) for cb in trainer.checkpoint_callbacks] == [RLCheckpoint]
    off = _cli(f"--trainer.default_root_dir={tmp_path}", "--trainer.enable_checkpointing=false").trainer
    assert off.checkpoint_callbacks == []


def test_a_users_model_checkpoint_replaces_the_section_and_saves_at_every_rl_step(tmp_path):
    cb = "lightning.pytorch.callbacks.ModelCheckpoint"
    trainer = _cli(f"--trainer.default_root_dir={tmp_path}", f"--trainer.callbacks+={cb}").trainer
    (saver,) = trainer.checkpoint_callbacks
    assert type(saver) is ModelCheckpoint
    assert saver._save_on_train_epoch_end is True and saver.save_last == "link"
    kept = _cli(
        f"--trainer.default_root_dir={tmp_path}",
        f"--trainer.callbacks+={cb}",
        "--trainer.callbacks.save_last=false",
        "--trainer.callbacks.save_on_train_epoch_end=false",
    ).trainer
    (saver,) = kept.checkpoint_callbacks
    assert saver._save_on_train_epoch_end is False and saver.save_last is False


def test_a_bad_ckpt_path_fails_before_classes_are_built(tmp_path):
    import rlinf_core.rl.module  # noqa: F401
    from rlinf_core.plugins.manager import load_plugins

    load_plugins()
    missing = tmp_path / "nope"
    from rlinf_core.run.checkpoint_files import CheckpointError

    with pytest.raises(CheckpointError, match="checkpoint .*nope does not exist"):
        RLinfCLI(
            pl.LightningModule,
            None,
            subclass_mode_model=True,
            args=["validate", *SMALL, f"--ckpt_path={missing}"],
            seed_everything_default=0,
            trainer_defaults=trainer_defaults(quiet=True),
            parser_kwargs={"exit_on_error": False, "validate": {"exit_on_error": False}},
        )
