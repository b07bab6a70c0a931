"""The shipped Wan configs: parse through `rlinf fit` and build their 5 B world model on the meta device."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from rlinf_core.cli.main import main
from rlinf_core.models.meta import meta_init, parameter_count
from rlinf_core.plugins.manager import Registry
from rlinf_wm_wan import WanWorldModel

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "wan"
DATA = Path(__file__).parent / "data"
SUITES = {"spatial": "ResnetRewardModel", "object": "ResnetRewardModel", "goal": "TaskEmbedResnetRewardModel"}


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_libero_config_parses_and_builds_the_5b_world_model_on_meta(suite, capsys):
    path = CONFIGS / f"wan_libero_{suite}_grpo_openvlaoft.yaml"
    with pytest.raises(SystemExit) as exit_info:  # the whole config through rlinf fit's parser, types checked
        main(["fit", "--config", str(path), "--print_config"])
    assert exit_info.value.code in (0, None) and "class_path: rlinf_wm_wan.WanWorldModel" in capsys.readouterr().out
    cfg = yaml.safe_load(path.read_text())["model"]["init_args"]
    env, wm = cfg["env"]["init_args"], cfg["env"]["init_args"]["world_model"]["init_args"]
    release = f"/path/to/RLinf-Wan-LIBERO-{suite.capitalize()}"
    assert wm["model_path"] == release and env["init_data_path"] == f"{release}/dataset" and env["enable_kir"]
    reward = env["reward_model"]
    assert reward["class_path"] == SUITES[suite] and reward["init_args"]["checkpoint"].startswith(release)
    eval_env = cfg["eval_env"]
    assert eval_env["class_path"] == "LiberoEnv" and eval_env["init_args"]["task_suite_name"] == f"libero_{suite}"
    policy = cfg["policy"]["init_args"]
    assert policy["actions"]["unnorm_key"] == f"libero_{suite}_no_noops" and policy["actions"]["num_action_chunks"] == 8
    assert Registry().load().resolve("world_model", reward["class_path"])
    with meta_init():  # no file under /path/to is read
        model = WanWorldModel(**wm)
    shapes = json.loads((DATA / "wan22_ti2v5b_action_dit_keys.json").read_text())
    assert parameter_count(model.dit) == sum(torch.Size(s).numel() for s in shapes.values())  # 5.03 B
    assert model.dit.blocks[0].attn1.to_q.weight.is_meta and model.image_size == 256


def test_smoke_config_names_a_tiny_release():
    cfg = yaml.safe_load((CONFIGS / "wan_cpu_smoke.yaml").read_text())
    env = cfg["model"]["init_args"]["env"]["init_args"]
    assert env["world_model"]["class_path"] == "WanWorldModel" and cfg["trainer"]["accelerator"] == "cpu"


def test_world_model_fit_config_parses_and_builds_the_5b_world_model_on_meta(capsys):
    path = CONFIGS / "wan_world_model_fit.yaml"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(path), "--print_config"])
    assert exit_info.value.code in (0, None) and "WorldModelTrainer" in capsys.readouterr().out
    cfg = yaml.safe_load(path.read_text())
    assert cfg["trainer"]["accelerator"] == "gpu"
    wm = cfg["model"]["init_args"]["world_model"]["init_args"]
    with meta_init():
        model = WanWorldModel(**wm)
    shapes = json.loads((DATA / "wan22_ti2v5b_action_dit_keys.json").read_text())
    assert parameter_count(model.dit) == sum(torch.Size(s).numel() for s in shapes.values())
