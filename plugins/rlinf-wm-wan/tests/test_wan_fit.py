"""GRPO with the tiny OpenVLA-OFT inside the tiny Wan world model through `rlinf fit` (the shipped smoke config)."""

import math
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf_core.cli.main import main
from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.testing import tiny_checkpoint

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "wan" / "wan_cpu_smoke.yaml"


def _scalars(run: Path, tag: str) -> list[float]:
    ea = EventAccumulator(str(run))
    ea.Reload()
    return [e.value for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def test_grpo_fit_with_tiny_oft_inside_tiny_wan(tiny_wan, tmp_path):
    oft = tiny_checkpoint(kind="oft", norm_keys=["libero_goal_no_noops"])
    wm = "--model.init_args.env.init_args"
    main(
        [
            "fit",
            "--config",
            str(CONFIG),
            f"{wm}.world_model.init_args.model_path={tiny_wan}",
            f"{wm}.reward_model.init_args.checkpoint={tiny_wan / 'resnet_rm.pth'}",
            f"{wm}.init_data_path={tiny_wan / 'dataset'}",
            f"--model.init_args.policy.init_args.model_path={oft}",
            "--model.init_args.rollout.recompute_logprobs=true",
            "--model.init_args.rollout.show_progress=false",
            "--trainer.max_epochs=2",
            "--trainer.check_val_every_n_epoch=2",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ]
    )
    run = next(tmp_path.glob("*/version_*"))
    mismatch = _scalars(run, "rollout/logprob_mismatch")
    assert mismatch and max(mismatch) < 1e-5  # rollout log-probs == the training recompute
    assert max(_scalars(run, "rollout/advantages_max")) > 0  # some GRPO group had mixed outcomes in the world model
    assert all(math.isfinite(v) for v in _scalars(run, "train/loss"))
    assert _scalars(run, "env/non_finite_episodes") == [0.0, 0.0]
    assert _scalars(run, "eval/success_once") and (run / "checkpoints" / "last.ckpt").is_file()
    exported = OpenVLAOFTPolicy(model_path=str(run / "policy"))
    before = OpenVLAOFTPolicy(model_path=str(oft))
    old = before.state_dict_for_export()
    assert any(not torch.equal(v, old[k]) for k, v in exported.state_dict_for_export().items())
