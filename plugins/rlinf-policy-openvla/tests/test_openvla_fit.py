"""Short `rlinf fit` runs of the shipped tiny configs on the built-in ReachEnv (PPO and GRPO)."""

import math
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf_core.cli.main import main
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig
from rlinf_policy_openvla.testing import tiny_checkpoint

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "openvla"


def _fit(config: str, tmp_path: Path, model_path: Path, extra: list[str]) -> Path:
    args = [
        "fit",
        "--config",
        str(CONFIGS / config),
        f"--model.init_args.policy.init_args.model_path={model_path}",
        "--model.init_args.env.init_args.trials_per_task=2",
        "--model.init_args.rollout.max_steps_per_rollout_epoch=8",
        "--model.init_args.rollout.recompute_logprobs=true",
        "--model.init_args.rollout.show_progress=false",
        "--trainer.max_epochs=2",
        "--trainer.check_val_every_n_epoch=2",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        *extra,
    ]
    main(args)
    return next(tmp_path.glob("*/version_*"))


def _scalars(run: Path, tag: str) -> list[float]:
    ea = EventAccumulator(str(run))
    ea.Reload()
    return [e.value for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def test_grpo_fit_with_tiny_oft(tmp_path):
    model = tiny_checkpoint(kind="oft", action_dim=2, norm_keys=["reach"])
    run = _fit(
        "reach_grpo_oft_tiny.yaml",
        tmp_path,
        model,
        [
            "--model.init_args.env.init_args.num_envs=8",
            "--model.init_args.env.init_args.group_size=4",
            "--model.init_args.env.init_args.radius=0.3",
            "--model.init_args.global_batch_size=16",
            "--model.init_args.micro_batch_size=8",
        ],
    )
    mismatch = _scalars(run, "rollout/logprob_mismatch")
    assert mismatch and max(mismatch) < 1e-5  # rollout log-probs == training recompute inside the RL loop
    assert all(math.isfinite(v) for v in _scalars(run, "train/actor/approx_kl"))
    assert max(_scalars(run, "rollout/advantages_max")) > 0  # some group had mixed outcomes
    assert _scalars(run, "eval/success_once") and (run / "checkpoints" / "last.ckpt").is_file()
    exported = OpenVLAOFTPolicy(model_path=str(run / "policy"))
    assert (exported.num_action_chunks, exported.action_dim, exported.unnorm_key) == (4, 2, "reach")
    before = OpenVLAOFTPolicy(model_path=str(model), actions=ActionConfig(num_action_chunks=4))
    changed = [
        k for k, v in exported.state_dict_for_export().items() if not torch.equal(v, before.state_dict_for_export()[k])
    ]
    assert changed, "training did not change the exported weights"


def test_ppo_fit_with_tiny_openvla_lora(tmp_path):
    model = tiny_checkpoint(kind="openvla", action_dim=2, norm_keys=["reach"])
    run = _fit(
        "reach_ppo_openvla_tiny.yaml",
        tmp_path,
        model,
        [
            "--model.init_args.env.init_args.num_envs=4",
            "--model.init_args.global_batch_size=16",
            "--model.init_args.micro_batch_size=8",
        ],
    )
    mismatch = _scalars(run, "rollout/logprob_mismatch")
    assert mismatch and max(mismatch) < 1e-5
    assert _scalars(run, "train/critic/explained_variance") and _scalars(run, "eval/success_once")
    lrs = {round(v, 8) for v in _scalars(run, "train/critic/lr")}
    assert lrs == {3e-3}  # the value head (saved with the adapter) gets its own learning rate
    exported = OpenVLAPolicy(model_path=str(run / "policy"))
    assert exported.has_value_head and not exported.is_lora
    assert not any("lora" in k for k in exported.state_dict())
