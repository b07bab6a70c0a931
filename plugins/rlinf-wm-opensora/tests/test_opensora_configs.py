"""The shipped GPU configs carry the world-model settings of RLinf's env/opensora_libero_spatial.yaml."""

from pathlib import Path

import pytest
import yaml

from rlinf_core.world_models.reward_models import UPSTREAM_SUCCESS_THRESHOLD

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "rlinf_wm_opensora" / "configs" / "opensora"


@pytest.mark.parametrize("suite", ["spatial", "object"])
def test_gpu_config_world_model_settings(suite):
    cfg = yaml.safe_load((CONFIGS / f"libero_{suite}_grpo_openvlaoft.yaml").read_text())["model"]["init_args"]
    env = cfg["env"]["init_args"]
    wm = env["world_model"]["init_args"]
    root = f"/path/to/RLinf-OpenSora-LIBERO-{suite.capitalize()}"
    assert cfg["env"]["class_path"] == "WorldModelEnv" and env["world_model"]["class_path"] == "OpenSoraWorldModel"
    assert wm == {
        "model_path": root,
        "chunk": 8,
        "num_sampling_steps": 10,
        "use_timestep_transform": True,
        "inference_dtype": "auto",
    }
    rm = {"class_path": "ResnetRewardModel", "init_args": {"checkpoint": f"{root}/resnet_rm.pth"}}
    assert env["reward_model"] == rm
    assert env["init_data_path"] == f"{root}/dataset"
    assert env["success_threshold"] == UPSTREAM_SUCCESS_THRESHOLD and env["success_frames"] == 1
    assert cfg["eval_env"]["class_path"] == "LiberoEnv"  # evaluation in the real simulator, as RLinf's guides do
    assert cfg["eval_env"]["init_args"]["task_suite_name"] == f"libero_{suite}"
    policy = cfg["policy"]["init_args"]
    assert (
        policy["model_path"].endswith(f"Openvla-oft-SFT-libero-{suite}-traj1") and policy["actions"]["invert_gripper"]
    )
