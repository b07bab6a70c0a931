"""RL checkpoints: configurable cadence, ``last.ckpt`` as a link (one write per checkpoint), trainable-only LoRA-style
checkpoints that resume with the frozen weights re-read from ``model_path``."""

import os
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.cli.main import main
from rlinf_core.rl.algorithms import PPO
from rlinf_core.rl.config import OptimConfig, RolloutConfig
from rlinf_core.rl.module import RLModule
from rlinf_core.run.checkpointing import FROZEN_KEY, RLCheckpoint

ROOT = Path(__file__).resolve().parents[2]


def _count_writes(monkeypatch) -> list[str]:
    writes: list[str] = []
    original = pl.Trainer.save_checkpoint

    def counting(self, filepath, *args, **kwargs):
        writes.append(Path(filepath).name)
        return original(self, filepath, *args, **kwargs)

    monkeypatch.setattr(pl.Trainer, "save_checkpoint", counting)
    return writes


def test_cli_checkpoint_cadence_keep_last_and_linked_last(tmp_path, monkeypatch):
    writes = _count_writes(monkeypatch)
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs/toy/reach_ppo.yaml"),
            "--trainer.max_epochs=6",
            "--trainer.check_val_every_n_epoch=100",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
            "--model.init_args.rollout.show_progress=false",
            "--model.init_args.env.init_args.num_envs=4",
            "--model.init_args.rollout.max_steps_per_rollout_epoch=4",
            "--model.init_args.env.init_args.max_episode_steps=4",
            "--model.init_args.export_policy=false",
            "--checkpoint.every_n_epochs=2",
            "--checkpoint.keep_last=2",
        ]
    )
    ckpts = Path(next(tmp_path.glob("reach_ppo/version_*"))) / "checkpoints"
    assert writes == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt", "epoch=5-step=24.ckpt"], "one write per checkpoint"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=3-step=16.ckpt", "epoch=5-step=24.ckpt", "last.ckpt"]
    assert (ckpts / "last.ckpt").is_symlink() and os.readlink(ckpts / "last.ckpt") == "epoch=5-step=24.ckpt"


def test_a_kill_while_last_ckpt_is_relinked_leaves_the_previous_link(tmp_path, monkeypatch):
    """last.ckpt moves by a rename over the old link (RLCheckpoint's override of Lightning's private
    _link_checkpoint: Lightning removes the link, then makes the new one, and has no public hook for this)."""
    real_replace, relinks = os.replace, []

    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith("last.ckpt"):
            relinks.append(Path(dst))
            if len(relinks) == 2:
                raise KeyboardInterrupt("killed between making the new link and renaming it")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(SystemExit):  # Lightning's shutdown on an interrupt, then rlinf's exit status
        main(
            [
                "fit",
                "--config",
                str(ROOT / "configs/toy/reach_ppo.yaml"),
                "--trainer.max_epochs=4",
                "--trainer.check_val_every_n_epoch=100",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                "--trainer.enable_progress_bar=false",
                "--model.init_args.rollout.show_progress=false",
                "--model.init_args.env.init_args.num_envs=4",
                "--model.init_args.rollout.max_steps_per_rollout_epoch=4",
                "--model.init_args.env.init_args.max_episode_steps=4",
                "--model.init_args.export_policy=false",
                "--checkpoint.every_n_epochs=2",
                "--checkpoint.keep_last=2",
            ]
        )
    last = relinks[-1]
    assert os.readlink(last) == "epoch=1-step=8.ckpt" and last.resolve().is_file()


def test_checkpoint_settings_are_checked():
    with pytest.raises(ValueError, match="keep_last"):
        RLCheckpoint(keep_last=0)
    with pytest.raises(ValueError, match="every_n_epochs"):
        RLCheckpoint(every_n_epochs=-1)


# ---- trainable-only checkpoints: a policy whose vision tower is a frozen "base model" read from model_path


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    torch.manual_seed(123)
    path = tmp_path_factory.mktemp("base")
    TinyVLAPolicy(action_dim=2, num_action_chunks=2, hidden_size=32).save_pretrained(path)
    return path


def _module(model_path: Path | None) -> RLModule:
    torch.manual_seed(0)
    policy = TinyVLAPolicy(action_dim=2, num_action_chunks=2, hidden_size=32, model_path=model_path)
    policy.vision.requires_grad_(False)  # the frozen base (as LoRA freezes the LLM and vision towers)
    env = ReachEnv(num_envs=4, max_episode_steps=4, auto_reset=True)
    return RLModule(
        env=env,
        policy=policy,
        algorithm=PPO(update_epoch=1),
        optim=OptimConfig(lr=1e-2),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False),
        global_batch_size=8,
        micro_batch_size=8,
        export_policy=False,
    )


def _trainer(tmp_path: Path, epochs: int, callbacks=()) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=TensorBoardLogger(str(tmp_path), name="t"),
        enable_checkpointing=bool(callbacks),
        callbacks=list(callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        check_val_every_n_epoch=1000,
    )


def test_trainable_only_checkpoint_resumes_with_frozen_weights_from_model_path(tmp_path, base_model):
    saver = RLCheckpoint(dirpath=str(tmp_path / "ckpt"))
    module = _module(base_model)
    _trainer(tmp_path, 2, [saver]).fit(module)
    trained = {k: v.clone() for k, v in module.state_dict().items()}
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    frozen = [k for k in trained if k.startswith("policy.vision.")]
    assert frozen and sorted(ckpt[FROZEN_KEY]["keys"]) == sorted(frozen)
    assert not set(frozen) & set(ckpt["state_dict"]), "frozen weights are not written"
    assert "policy.action_head.weight" in ckpt["state_dict"] and ckpt["optimizer_states"][0]["state"]

    resumed = _module(base_model)  # the frozen base is read from model_path again
    trainer = _trainer(tmp_path / "r", 3)
    trainer.validate(resumed, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), verbose=False)
    for k, v in resumed.state_dict().items():
        torch.testing.assert_close(v, trained[k], msg=k)
    trainer.fit(resumed, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert trainer.current_epoch == 3

    other_base = _module(None)  # a different (random) base: resuming must refuse, in one line
    with pytest.raises(ValueError, match="frozen weights differ .* same model_path"):
        _trainer(tmp_path / "o", 3).validate(other_base, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), verbose=False)


def test_full_checkpoint_when_trainable_only_is_off(tmp_path, base_model):
    saver = RLCheckpoint(dirpath=str(tmp_path / "ckpt"), trainable_only=False)
    _trainer(tmp_path, 1, [saver]).fit(_module(base_model))
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert "policy.vision.0.weight" in ckpt["state_dict"] and FROZEN_KEY not in ckpt
