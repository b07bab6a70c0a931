"""Pre-fit check: an env and a policy that state different action_dim / num_action_chunks stop the run in one line
naming both keys, before anything is built."""

import pytest

from rlinf_core.cli.action_sizes import check_action_sizes
from rlinf_core.cli.main import main


def _cfg(env_args: dict, policy_args: dict, eval_args: dict | None = None) -> dict:
    args = {
        "env": {"class_path": "MyEnv", "init_args": env_args},
        "policy": {"class_path": "MyPolicy", "init_args": policy_args},
    }
    if eval_args is not None:
        args["eval_env"] = {"class_path": "MyEnv", "init_args": eval_args}
    return {"model": {"class_path": "RLModule", "init_args": args}}


def test_disagreeing_sizes_name_both_keys():
    with pytest.raises(ValueError) as caught:
        check_action_sizes(_cfg({"action_dim": 7, "num_action_chunks": 4}, {"action_dim": 7, "num_action_chunks": 8}))
    msg = str(caught.value)
    assert msg.startswith(
        "model.init_args.env.init_args.num_action_chunks (4) and "
        "model.init_args.policy.init_args.num_action_chunks (8) disagree"
    ), msg
    with pytest.raises(
        ValueError,
        match=r"eval_env.init_args.action_dim \(4\) and model.init_args.policy.init_args"
        r".actions.action_dim \(7\)",
    ):  # a policy's setting group, the eval env
        check_action_sizes(_cfg({}, {"actions": {"action_dim": 7}}, {"action_dim": 4}))
    with pytest.raises(ValueError, match=r"world_model.init_args.action_dim \(2\) and .*policy.init_args.action_dim"):
        check_action_sizes(
            _cfg({"world_model": {"class_path": "W", "init_args": {"action_dim": 2}}}, {"action_dim": 3})
        )


def test_agreeing_or_one_sided_sizes_pass():
    check_action_sizes(
        _cfg({"action_dim": 7, "num_action_chunks": 8}, {"actions": {"action_dim": 7, "num_action_chunks": 8}})
    )
    check_action_sizes(_cfg({"num_envs": 4}, {"action_dim": 2, "num_action_chunks": 2}))
    check_action_sizes({"model": {"class_path": "SFTModule", "init_args": {"data_path": "x"}}})


def test_rlinf_fit_refuses_before_building_anything(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        """
model:
  class_path: RLModule
  init_args:
    env:
      class_path: WorldModelEnv
      init_args:
        world_model: {class_path: ToyWorldModel, init_args: {action_dim: 3}}
        reward_model: {class_path: ToyRewardModel}
        init_data_path: does_not_exist
    policy:
      class_path: TinyVLAPolicy
      init_args: {action_dim: 2, num_action_chunks: 2}
    algorithm: {class_path: GRPO}
trainer: {accelerator: cpu, logger: false, default_root_dir: TMP}
""".replace("TMP", str(tmp_path))
    )
    with pytest.raises(SystemExit) as caught:
        main(["fit", "--config", str(config)])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "rlinf: error: model.init_args.env.init_args.world_model.init_args.action_dim (3) and "
        "model.init_args.policy.init_args.action_dim (2) disagree"
    ), err
    assert not (tmp_path / "lightning_logs").exists()
