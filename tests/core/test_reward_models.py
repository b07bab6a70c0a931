"""The ResNet-18 success classifiers: released key names, .pth round trips, strict errors, the upstream success rule."""

import numpy as np
import pytest
import torch

from rlinf_core.builtin.toy_world_model import ToyWorldModel
from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.testing.world_model_conformance import RewardModelPluginTests
from rlinf_core.world_models.init_data import save_init_trajectory
from rlinf_core.world_models.reward_models import (
    LIBERO_TASKS,
    UPSTREAM_SUCCESS_THRESHOLD,
    ResnetRewardModel,
    TaskEmbedResnetRewardModel,
    load_reward_model,
)

GOAL = LIBERO_TASKS["libero_goal"]


class TestResnetRewardModelKit(RewardModelPluginTests):
    model_class = ResnetRewardModel
    image_size = 16


class TestTaskEmbedResnetRewardModelKit(RewardModelPluginTests):
    model_class = TaskEmbedResnetRewardModel
    image_size = 16
    instructions = (GOAL[0], GOAL[9])


def frames(n, size=16, seed=0):
    return torch.randint(0, 256, (n, size, size, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def test_the_released_key_names_and_shapes():
    sd = ResnetRewardModel().state_dict()
    assert sd["net.0.0.weight"].shape == (64, 3, 7, 7) and "net.0.1.running_mean" in sd
    assert sd["net.1.0.conv1.weight"].shape == (64, 64, 3, 3) and "net.1.0.conv3.weight" not in sd
    assert sd["net.2.0.conv3.weight"].shape == (128, 64, 1, 1) and sd["net.4.1.bn2.weight"].shape == (512,)
    assert sd["net.7.weight"].shape == (1, 512) and sd["net.7.bias"].shape == (1,)
    assert not any(k.startswith(("net.5", "net.6", "net.8")) for k in sd)  # pool, flatten, sigmoid
    te = TaskEmbedResnetRewardModel().state_dict()
    assert te["visual_encoder.4.0.conv3.weight"].shape == (512, 256, 1, 1)
    assert te["task_embedding.weight"].shape == (10, 64)
    assert te["fusion_layer.0.weight"].shape == (256, 576) and te["fusion_layer.3.weight"].shape == (1, 256)
    assert {k.split(".")[0] for k in te} == {"visual_encoder", "task_embedding", "fusion_layer"}


@pytest.mark.parametrize("wrap", [False, True], ids=["raw", "model_state_dict"])
def test_pth_round_trip_loads_the_same_model(tmp_path, wrap):
    model = ResnetRewardModel().eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    state = model.state_dict()
    torch.save({"model_state_dict": state} if wrap else state, tmp_path / "resnet_rm.pth")
    loaded = load_reward_model(tmp_path / "resnet_rm.pth")
    assert isinstance(loaded, ResnetRewardModel)
    by_arg = ResnetRewardModel(checkpoint=str(tmp_path / "resnet_rm.pth")).eval()
    with torch.no_grad():
        p = model.success_prob(frames(3))
        torch.testing.assert_close(loaded.success_prob(frames(3)), p)
        torch.testing.assert_close(by_arg.success_prob(frames(3)), p)


def test_taskemb_round_trip_and_the_instruction_mapping(tmp_path):
    model = TaskEmbedResnetRewardModel().eval()
    path = model.save_pretrained(tmp_path)
    assert path.name == "taskemb_resnet_rm.pth"
    loaded = load_reward_model(path)
    assert isinstance(loaded, TaskEmbedResnetRewardModel)
    assert loaded.task_ids([GOAL[9], " turn on the stove ", GOAL[0]], 3).tolist() == [9, 9, 0]
    texts = [GOAL[0], GOAL[5], GOAL[9]]
    with torch.no_grad():
        same = frames(1).expand(3, -1, -1, -1)
        p = loaded.success_prob(same, texts)
        torch.testing.assert_close(p, model.success_prob(same, texts))
    assert len(set(p.tolist())) == 3  # the task embedding conditions the prediction
    spatial = TaskEmbedResnetRewardModel(task_suite="libero_spatial")
    assert spatial.task_ids([LIBERO_TASKS["libero_spatial"][3]], 1).tolist() == [3]


def test_unknown_instruction_is_one_line_listing_the_known_ones():
    model = TaskEmbedResnetRewardModel().eval()
    with pytest.raises(ValueError) as exc:
        model.success_prob(frames(1), ["open the fridge"])
    msg = str(exc.value)
    assert "\n" not in msg and "'open the fridge'" in msg and GOAL[3] in msg and "libero_goal" in msg
    with pytest.raises(ValueError, match="one instruction per frame"):
        model.success_prob(frames(2), None)
    with pytest.raises(ValueError, match="unknown task_suite 'libero_90'"):
        TaskEmbedResnetRewardModel(task_suite="libero_90")


def test_bad_checkpoints_fail_in_one_line_naming_the_key(tmp_path):
    state = ResnetRewardModel().state_dict()
    cases = {
        "missing": ({k: v for k, v in state.items() if k != "net.7.weight"}, "missing key 'net.7.weight'"),
        "unexpected": ({**state, "net.9.weight": torch.zeros(1)}, "unexpected key 'net.9.weight'"),
        "shape": ({**state, "net.7.weight": torch.zeros(2, 512)}, "key 'net.7.weight' has shape [2, 512]"),
        "foreign": ({"encoder.weight": torch.zeros(1)}, "neither a ResnetRewardModel"),
    }
    for name, (sd, expected) in cases.items():
        torch.save(sd, tmp_path / f"{name}.pth")
        with pytest.raises(ValueError) as exc:
            load_reward_model(tmp_path / f"{name}.pth")
        assert expected in str(exc.value) and "\n" not in str(exc.value), (name, str(exc.value))
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a loadable .pth"):
        load_reward_model(tmp_path / "junk.pth")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ResnetRewardModel(checkpoint=str(tmp_path / "none.pth"))
    # a checkpoint saved without BatchNorm's step counters (older torch) still loads
    torch.save({k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}, tmp_path / "old.pth")
    load_reward_model(tmp_path / "old.pth")


def test_success_prob_is_upstreams_predict_rew_before_rounding():
    model = ResnetRewardModel().eval()
    x = frames(4)
    with torch.no_grad():
        p = model.success_prob(x)
        upstream = model.predict_rew(x.permute(0, 3, 1, 2).float() / 127.5 - 1)
    assert p.shape == (4,) and p.dtype == torch.float32
    assert torch.equal(torch.round(p), upstream[:, 0])


def constant_reward_model(p_logit: float) -> ResnetRewardModel:
    """Every frame gets probability sigmoid(p_logit)."""
    model = ResnetRewardModel()
    with torch.no_grad():
        model.net[7].weight.zero_()
        model.net[7].bias.fill_(p_logit)
    return model.eval()


@pytest.mark.parametrize("logit", [0.0, 1e-3, -1e-3])
def test_env_success_rule_with_the_upstream_threshold_is_round_sigmoid(tmp_path, logit):
    """Upstream: success iff round(sigmoid) == 1, i.e. p > 0.5 (torch.round(0.5) == 0)."""
    save_init_trajectory(tmp_path / "traj0.npy", np.zeros((1, 16, 16, 3), np.uint8), "t", np.zeros((1, 2)))
    rm = constant_reward_model(logit)
    upstream = bool(rm.predict_rew(torch.zeros(1, 3, 16, 16))[0, 0] >= 0.9)
    env = WorldModelEnv(
        ToyWorldModel(),
        rm,
        str(tmp_path),
        success_threshold=UPSTREAM_SUCCESS_THRESHOLD,
        reward_coef=5.0,
        num_envs=1,
        max_episode_steps=8,
    )
    env.reset()
    out = env.chunk_step(torch.zeros(1, 2, 2))
    assert bool(out.success[0, 0]) == upstream == (logit > 0)
    assert out.rewards[0].sum().item() == (5.0 if upstream else 0.0)
