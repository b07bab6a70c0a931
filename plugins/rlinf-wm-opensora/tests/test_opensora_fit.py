"""GRPO with the tiny OpenVLA-OFT inside the tiny OpenSora world model through `rlinf fit` (the shipped CPU smoke)."""

import math
from pathlib import Path

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf.cli import main
from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.testing import tiny_checkpoint
from rlinf_wm_opensora.testing import tiny_world_model

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "opensora" / "cpu_smoke.yaml"


def _scalars(run: Path, tag: str) -> list[float]:
    ea = EventAccumulator(str(run))
    ea.Reload()
    return [e.value for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def test_grpo_in_the_tiny_world_model(tmp_path):
    wm = tiny_world_model()
    policy = tiny_checkpoint(kind="oft", action_dim=7, norm_keys=["libero_spatial_no_noops"])
    args = ["fit", "--config", str(CONFIG), f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--trainer.max_epochs=3", "--trainer.check_val_every_n_epoch=3",
            "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
            f"--model.init_args.policy.init_args.model_path={policy}",
            "--model.init_args.rollout.recompute_logprobs=true"]
    for env in ("env", "eval_env"):
        args += [f"--model.init_args.{env}.init_args.world_model.init_args.model_path={wm}",
                 f"--model.init_args.{env}.init_args.reward_model.init_args.checkpoint={wm / 'resnet_rm.pth'}",
                 f"--model.init_args.{env}.init_args.init_data_path={wm / 'dataset'}"]
    main(args)
    run = next(tmp_path.glob("*/version_*"))
    mismatch = _scalars(run, "rollout/logprob_mismatch")
    assert mismatch and max(mismatch) < 1e-5  # rollout log-probs == training recompute
    assert max(_scalars(run, "rollout/advantages_max")) > 0  # the reward classifier split some group
    assert all(math.isfinite(v) for v in _scalars(run, "train/actor/pg_loss"))
    assert len(_scalars(run, "eval/success_once")) == 1 and (run / "checkpoints" / "last.ckpt").is_file()
    exported = OpenVLAOFTPolicy(model_path=str(run / "policy"))
    before = OpenVLAOFTPolicy(model_path=str(policy))
    changed = [k for k, v in exported.state_dict_for_export().items()
               if not torch.equal(v, before.state_dict_for_export()[k])]
    assert changed, "GRPO inside the world model did not change the policy"
