"""The config groups ``actions:`` / ``inputs:``: the schema, RLinf's flat names, and readers of the grouped keys."""

from dataclasses import fields

import pytest

from rlinf_core.foundation.signatures import constructor_parameters
from rlinf_core.models.settings import grouped_settings
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import FLAT_KEYS, GROUPS, ActionConfig, InputConfig


@pytest.mark.parametrize("cls", [OpenVLAPolicy, OpenVLAOFTPolicy])
def test_constructor_is_a_small_schema(cls):
    params = list(constructor_parameters(cls))
    assert len(params) <= 12, params
    assert {"actions", "inputs", "add_value_head", "lora"} <= set(params)
    for name in FLAT_KEYS:  # every grouped setting lives only in its group
        assert name not in params, name


def test_flat_names_map_onto_every_group_field():
    assert {FLAT_KEYS[f.name] for f in fields(ActionConfig)} == {("actions", f.name) for f in fields(ActionConfig)}
    assert {FLAT_KEYS[f.name] for f in fields(InputConfig)} == {("inputs", f.name) for f in fields(InputConfig)}
    old = {
        "unnorm_key": "bridge_orig",
        "num_action_chunks": 4,
        "center_crop": True,
        "top_k": 50,
        "inputs": {"max_prompt_length": 30},
    }
    assert grouped_settings(old, GROUPS, FLAT_KEYS) == {  # what from_pretrained passes the constructor
        "top_k": 50,
        "actions": {"unnorm_key": "bridge_orig", "num_action_chunks": 4},
        "inputs": {"max_prompt_length": 30, "center_crop": True},
    }
    given = grouped_settings({"inputs": InputConfig(use_proprio=True), "proprio_dim": 8}, GROUPS, FLAT_KEYS)
    assert InputConfig(**given["inputs"]) == InputConfig(use_proprio=True, proprio_dim=8)


def test_group_values_are_checked_when_parsed():
    with pytest.raises(ValueError, match="num_action_chunks must be >= 1"):
        ActionConfig(num_action_chunks=0)
    with pytest.raises(ValueError, match="normalization_type 'q95' not supported"):
        ActionConfig(normalization_type="q95")
    with pytest.raises(ValueError, match="image_resize must be one of"):
        InputConfig(image_resize="lanczos")


def _warmup_warnings(policy_args: dict) -> list[str]:
    from rlinf_core.cli.combos import check_combinations

    cfg = {
        "trainer": {"max_epochs": 1},
        "model": {
            "class_path": "RLModule",
            "init_args": {
                "policy": {"class_path": "OpenVLAOFTPolicy", "init_args": policy_args},
                "env": {"class_path": "ReachEnv", "init_args": {"num_envs": 64}},
                "rollout": {"max_steps_per_rollout_epoch": 100},
                "optim": {"lr_warmup_steps": 10},
            },
        },
    }
    warnings = []
    check_combinations(cfg, warnings.append)
    return [w for w in warnings if "lr_warmup_steps" in w]


def test_start_checks_read_the_chunks_from_the_actions_group():
    # 64 envs x 100 steps: 25 optimizer steps per RL step with chunks of 1, 3 with chunks of 8 (< 10 warmup steps)
    assert _warmup_warnings({"actions": {"num_action_chunks": 1}}) == []
    assert _warmup_warnings({"actions": {"num_action_chunks": 8}}), "chunks in the actions group were not read"


def test_serve_overrides_reach_the_groups():
    from rlinf_core.serve.loading import _check_overrides, _with_overrides

    overrides = {"unnorm_key": "bridge_orig", "num_action_chunks": 4, "precision": "bf16"}
    _check_overrides(OpenVLAOFTPolicy, overrides)  # rlinf serve --unnorm-key / --chunk: no "has no setting"
    run_args = {"model_path": "/m", "actions": {"unnorm_key": "libero_spatial", "invert_gripper": True}}
    assert _with_overrides(OpenVLAOFTPolicy, run_args, overrides) == {
        "model_path": "/m",
        "precision": "bf16",
        "actions": {"unnorm_key": "bridge_orig", "invert_gripper": True, "num_action_chunks": 4},
    }
