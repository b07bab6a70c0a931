"""Nothing lost: an earlier run's directory is never written into, and non-finite weights are never exported."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.cli.main import main
from rlinf_core.rl.algorithms import GRPO
from rlinf_core.rl.config import OptimConfig, RolloutConfig
from rlinf_core.rl.module import RLModule

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--trainer.max_epochs=1",
    "--trainer.check_val_every_n_epoch=5",
    "--trainer.enable_progress_bar=false",
    "--model.init_args.rollout.show_progress=false",
    "--model.init_args.env.init_args.num_envs=8",
    "--model.init_args.env.init_args.group_size=4",
    "--model.init_args.rollout.max_steps_per_rollout_epoch=4",
]


def test_pinned_logger_version_of_an_earlier_run_is_refused_untouched(tmp_path, capsys):
    args = [
        "fit",
        "--config",
        str(ROOT / "configs/toy/reach_grpo.yaml"),
        *SMALL,
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--trainer.logger.init_args.version=0",
    ]
    main(args)
    run = tmp_path / "reach_grpo/version_0"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.is_symlink()}
    assert (run / "policy").is_dir() and (run / "config.yaml").is_file()
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([*args, "--model.init_args.optim.lr=0.5"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlinf:")]
    assert info.value.code == 2 and len(err) == 1 and "holds an earlier run's outputs" in err[0]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.is_symlink()} == before


class _PoisonWeights(pl.Callback):
    """Fault injection: a NaN in the policy after the last update (as lr: inf or a diverged run would leave)."""

    def on_train_epoch_end(self, trainer, pl_module):
        with torch.no_grad():
            pl_module.policy.action_head.weight[0, 0] = float("nan")


def test_non_finite_weights_are_never_exported(tmp_path):
    torch.manual_seed(0)
    module = RLModule(
        env=ReachEnv(num_envs=4, group_size=2, max_episode_steps=4, auto_reset=False),
        policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2, hidden_size=32),
        algorithm=GRPO(update_epoch=1),
        optim=OptimConfig(lr=1e-2),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False),
        global_batch_size=8,
        micro_batch_size=8,
        export_policy=True,
    )
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=TensorBoardLogger(str(tmp_path), name="t"),
        enable_checkpointing=False,
        callbacks=[_PoisonWeights()],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        check_val_every_n_epoch=5,
    )
    with pytest.raises(ValueError, match=r"non-finite weights after step \d+ \(e.g. action_head.weight\); not expo"):
        trainer.fit(module)
    assert not list(tmp_path.rglob("policy")), "nothing exported"
