"""GRPO with the tiny OpenVLA-OFT inside the tiny OpenSora world model through `rlinf fit` (the shipped CPU smoke)
with the GPU configs' split: training in the world model, evaluation in the real LIBERO-Spatial simulator. The
rollouts are recorded and the world model is then fine-tuned on them (the data loop of the OpenSora guide's users)."""

import math
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf_core.cli.main import main
from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.testing import tiny_checkpoint
from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "opensora"
CONFIG = CONFIGS / "cpu_smoke.yaml"


def _scalars(run: Path, tag: str) -> list[float]:
    ea = EventAccumulator(str(run))
    ea.Reload()
    return [e.value for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def test_grpo_in_the_tiny_world_model_then_fine_tune_it_on_the_recorded_rollouts(tmp_path):
    wm = tiny_world_model()
    policy = tiny_checkpoint(kind="oft", action_dim=7, norm_keys=["libero_spatial_no_noops"])
    record = tmp_path / "record.yaml"
    record.write_text("trainer:\n  callbacks:\n    - class_path: RolloutRecorder\n      init_args: {eval: false}\n")
    real_eval = tmp_path / "libero_eval.yaml"  # the GPU configs' eval: every (task, trial) of the real suite
    real_eval.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "init_args": {
                        "eval_env": {
                            "class_path": "LiberoEnv",
                            "init_args": {
                                "task_suite_name": "libero_spatial",
                                "task_id_filter": [0],
                                "trials_per_task": 2,
                                "num_envs": 2,
                                "is_eval": True,
                                "auto_reset": True,
                                "ignore_terminations": True,
                                "max_episode_steps": 16,
                                "render": {"image_size": 64, "fast_render": True},
                                "sim": {"settle_steps": 2},
                                "reward": {"coef": 5.0},
                            },
                        }
                    }
                }
            }
        )
    )
    args = [
        "fit",
        "--config",
        str(CONFIG),
        "--config",
        str(record),
        "--config",
        str(real_eval),
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--trainer.max_epochs=3",
        "--trainer.check_val_every_n_epoch=3",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--model.init_args.policy.init_args.model_path={policy}",
        "--model.init_args.rollout.recompute_logprobs=true",
    ]
    args += [
        f"--model.init_args.env.init_args.world_model.init_args.model_path={wm}",
        f"--model.init_args.env.init_args.reward_model.init_args.checkpoint={wm / 'resnet_rm.pth'}",
        f"--model.init_args.env.init_args.init_data_path={wm / 'dataset'}",
    ]
    main(args)
    run = next(tmp_path.glob("*/version_*"))
    mismatch = _scalars(run, "rollout/logprob_mismatch")
    assert mismatch and max(mismatch) < 1e-5  # rollout log-probs == training recompute
    assert max(_scalars(run, "rollout/advantages_max")) > 0  # the reward classifier split some group
    assert all(math.isfinite(v) for v in _scalars(run, "train/actor/pg_loss"))
    assert len(_scalars(run, "eval/success_once")) == 1 and (run / "checkpoints" / "last.ckpt").is_file()
    table = next((run / "eval").glob("*.md")).read_text()
    assert "libero_spatial/pick_up_the_black_bowl_between_the_plate_and_the_ramekin" in table  # the real task 0
    exported = OpenVLAOFTPolicy(model_path=str(run / "policy"))
    before = OpenVLAOFTPolicy(model_path=str(policy))
    changed = [
        k for k, v in exported.state_dict_for_export().items() if not torch.equal(v, before.state_dict_for_export()[k])
    ]
    assert changed, "GRPO inside the world model did not change the policy"

    rollouts = run / "rollouts" / "train"
    assert len(list(rollouts.glob("traj*.npy"))) >= 8  # one file per finished episode of the 8 sub-envs
    main(
        [
            "fit",
            "--config",
            str(CONFIGS / "world_model_fit.yaml"),
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--model.init_args.world_model.init_args.model_path={wm}",
            f"--model.init_args.data_path={rollouts}",
            "--model.init_args.stride=8",
            "--model.init_args.batch_size=8",
            "--model.init_args.val_fraction=0",
            "--trainer.max_epochs=1",
            "--trainer.accelerator=cpu",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_model_summary=false",
        ]
    )
    export = next(tmp_path.glob("opensora_world_model/version_*")) / "world_model"
    tuned = OpenSoraWorldModel(str(export))
    assert not torch.equal(tuned.dit.t_block[1].weight, OpenSoraWorldModel(str(wm)).dit.t_block[1].weight)
