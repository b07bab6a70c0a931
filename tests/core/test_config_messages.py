"""What ``rlinf fit`` says about bad configs, and where its messages point.

Each case runs ``rlinf fit`` in-process on the toy GRPO config: an error is one ``rlinf: error:`` line with exit
status 2; what might be deliberate runs and prints one named ``rlinf: warning:`` line (docs/reliability.md).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import lightning.pytorch  # noqa: F401 - binds its log handler to sys.stderr now, not to one test's capsys
import pytest
import yaml

from rlinf_core.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "configs/toy/reach_grpo.yaml"
FAST = ["--trainer.max_epochs=0"]
# one short RL step: 8 envs (one group), 12 env steps, no eval, no checkpoint, no export
ONE_STEP = [
    "--trainer.max_epochs=1",
    "--trainer.check_val_every_n_epoch=null",
    "--trainer.enable_checkpointing=false",
    "--model.init_args.export_policy=false",
    "--model.init_args.env.init_args.num_envs=8",
    "--model.init_args.env.init_args.max_episode_steps=12",
    "--model.init_args.rollout.max_steps_per_rollout_epoch=12",
    "--model.init_args.global_batch_size=48",
    "--model.init_args.micro_batch_size=48",
]


def _toy(**edits) -> dict:
    """The toy GRPO config with ``a__b__c=value`` edits (``init_args`` levels written out)."""
    cfg = yaml.safe_load(TOY.read_text())
    for dotted, value in edits.items():
        keys = dotted.split("__")
        node = cfg
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return cfg


def _fit(tmp_path: Path, capsys, cfg: dict | None, *flags: str) -> tuple[int, list[str]]:
    args = list(flags)
    if cfg is not None:
        path = tmp_path / f"c{len(list(tmp_path.glob('c*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        args = ["--config", str(path), *args]
    capsys.readouterr()
    try:
        code = main(["fit", *args])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]
    return code, [ln for ln in err.splitlines() if ln.strip()]


def _one_error(code, lines) -> str:
    errors = [ln for ln in lines if ln.startswith("rlinf: error: ")]
    assert code == 2 and len(errors) == 1 and errors[0] == lines[-1] and len(errors[0]) <= 400, lines[-5:]
    return errors[0]


def _warnings(code, lines) -> list[str]:
    assert code == 0, lines[-5:]
    return [ln for ln in lines if ln.startswith("rlinf: warning: ")]


POL, ENV = "model__init_args__policy__init_args__", "model__init_args__env__init_args__"


# ------------------------------------------------------------------ silently accepted -> a named warning
@pytest.mark.parametrize(
    "edits, flags, expected",
    [
        (
            {"model__init_args__global_batch_size": 4096},
            ["--model.init_args.micro_batch_size=128"],
            "global_batch_size (4096) is larger than the 768 samples one RL step collects",
        ),
        ({"model__init_args__optim": {"lr": 1e6, "clip_grad": 1.0}}, [], "optim.lr (1e+06) is above 1"),
        (
            {ENV + "max_episode_steps": 25, "model__init_args__rollout__max_steps_per_rollout_epoch": 26},
            [],
            "env.max_episode_steps (25) is not a multiple of the policy's num_action_chunks (2)",
        ),
    ],
)
def test_silently_accepted_settings_now_warn_by_name(tmp_path, capsys, monkeypatch, edits, flags, expected):
    monkeypatch.chdir(tmp_path)
    warnings = _warnings(*_fit(tmp_path, capsys, _toy(**edits), *FAST, *flags))
    assert len(warnings) == 1 and expected in warnings[0], warnings


def test_a_reward_filter_that_drops_every_group_warns_once(tmp_path, capsys, monkeypatch):
    """Every group of the first RL steps fails (a fresh policy on a 2-step episode cannot reach the target): the
    filter [0.1, 0.9] keeps none, so nothing is learned; one warning says so, and the metric logs it."""
    monkeypatch.chdir(tmp_path)
    algo = "model__init_args__algorithm__init_args__"
    cfg = _toy(**{algo + "filter_rewards": True})
    flags = [
        *ONE_STEP,
        "--trainer.max_epochs=2",
        "--model.init_args.env.init_args.max_episode_steps=2",
        "--model.init_args.rollout.max_steps_per_rollout_epoch=2",
        "--model.init_args.global_batch_size=8",
        "--model.init_args.micro_batch_size=8",
    ]
    warnings = _warnings(*_fit(tmp_path, capsys, cfg, *flags))
    dropped = [w for w in warnings if "algorithm.filter_rewards dropped every one of 1 groups" in w]
    assert len(dropped) == 1, warnings


# ------------------------------------------------------------------ buried in a traceback -> one line
def test_a_policy_that_cannot_read_the_env_state_fails_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _one_error(*_fit(tmp_path, capsys, _toy(**{POL + "state_dim": 3}), *ONE_STEP))
    assert "policy TinyVLAPolicy cannot read the observations of env ReachEnv" in line, line
    assert "expects states [B, 3], got (8, 4)" in line, line


@pytest.mark.parametrize(
    "edits, expected",
    [
        ({ENV + "task_id_filter": [9]}, "env.task_id_filter [9]: ReachEnv has no task 9 (task ids 0..2)"),
        ({ENV + "reset_state_id_filter": [10**6]}, "env.reset_state_id_filter [1000000] leaves no initial state"),
    ],
)
def test_reset_filters_that_leave_nothing_fail_in_one_line(tmp_path, capsys, monkeypatch, edits, expected):
    monkeypatch.chdir(tmp_path)
    line = _one_error(*_fit(tmp_path, capsys, _toy(**edits), *FAST))
    assert expected in line, line
    assert not (tmp_path / "runs").exists()


def test_lightning_optimizer_beside_an_rlinf_module_fails_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _one_error(*_fit(tmp_path, capsys, None, "--config", str(TOY), *FAST, "--optimizer=Adam"))
    assert "optimizer: is LightningCLI's, but RLModule configures its own" in line, line
    assert "model.init_args.optim" in line


def test_an_export_whose_config_does_not_match_its_weights_fails_in_one_line(tmp_path, capsys, monkeypatch):
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    monkeypatch.chdir(tmp_path)
    export = tmp_path / "export"
    TinyVLAPolicy(hidden_size=32, add_value_head=False).save_pretrained(export)
    cfg = json.loads((export / "config.json").read_text())
    (export / "config.json").write_text(json.dumps({**cfg, "hidden_size": 48}))
    line = _one_error(*_fit(tmp_path, capsys, _toy(**{POL + "model_path": str(export)}), *FAST))
    assert "config.json does not match the weights" in line and "(44, 32)" in line and "(44, 48)" in line, line


def test_a_zip_of_garbage_as_ckpt_fails_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, payload in (("garbage", bytes(range(43, 143))), ("text", b"hello world")):
        ckpt = tmp_path / f"{name}.ckpt"
        with zipfile.ZipFile(ckpt, "w") as z:  # a valid zip (CRCs good) whose pickle is not a checkpoint's
            z.writestr("archive/data.pkl", payload)
            z.writestr("archive/version", "3\n")
        line = _one_error(*_fit(tmp_path, capsys, None, "--config", str(TOY), *FAST, f"--ckpt_path={ckpt}"))
        assert f"checkpoint {ckpt} cannot be loaded safely" in line and "weights_only=False" not in line, line
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ messages that point at the fix
def test_a_yaml_key_typo_gets_did_you_mean_and_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _toy()
    cfg["trainer"]["max_epoch"] = cfg["trainer"].pop("max_epochs")
    line = _one_error(*_fit(tmp_path, capsys, cfg))
    assert "did you mean trainer.max_epochs?" in line and str(tmp_path / "c0.yaml") in line, line
    cfg = _toy()
    cfg["model"]["init_args"]["optim"]["learning_rate"] = 0.1
    line = _one_error(*_fit(tmp_path, capsys, cfg, *FAST))
    assert "optim.lr?" in line and str(tmp_path / "c1.yaml") in line, line


def test_a_missing_config_names_the_nearest_and_a_plugin_config_the_install(tmp_path, capsys, monkeypatch):
    import importlib.metadata as md

    monkeypatch.chdir(tmp_path)
    line = _one_error(*_fit(tmp_path, capsys, None, "--config", str(ROOT / "configs/toy/reach_grp.yaml")))
    assert "did you mean" in line and "configs/toy/reach_grpo.yaml" in line, line
    line = _one_error(*_fit(tmp_path, capsys, None, "--config", "toy/reach_pp.yaml"))
    assert "did you mean toy/reach_ppo.yaml?" in line, line
    real = md.distribution

    def without_libero(name):
        if name == "rlinf-env-libero":
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(md, "distribution", without_libero)
    line = _one_error(*_fit(tmp_path, capsys, None, "--config", "libero/spatial_typo.yaml"))
    assert "shipped by rlinf-env-libero, which is not installed: pip install" in line, line


def test_config_providers_name_the_package_of_every_shipped_config():
    """The install hint's table agrees with what each installed package really ships."""
    from importlib.metadata import packages_distributions

    from rlinf_core.cli.configs import config_provider, shipped_configs

    dists = packages_distributions()
    for config in shipped_configs():
        assert config_provider(config.name) in dists[config.package], (config.name, config.package)


def test_a_negative_batch_size_is_named_before_the_seed_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, lines = _fit(tmp_path, capsys, None, "--config", str(TOY), "--model.init_args.global_batch_size=-128")
    line = _one_error(code, lines)
    assert "model.init_args.global_batch_size must be >= 1, got -128" in line, line
    assert not any(ln.startswith("Seed set") for ln in lines), lines


@pytest.mark.parametrize(
    "flag, expected",
    [
        (
            "algorithm.init_args.update_epoch=0",
            "model.init_args.algorithm.init_args.update_epoch must be in [1, 1000], got 0",
        ),
        ("algorithm.init_args.clip_ratio_c=0.5", "algorithm.init_args.clip_ratio_c must be > 1, got 0.5"),
        ("env.init_args.group_size=1", "GRPO needs model.init_args.env.init_args.group_size > 1"),
        (
            "policy.init_args.action_dim=3",
            "env.action_dim (2) and model.init_args.policy.init_args.action_dim (3) disagree",
        ),
        (
            "rollout.pipeline_stage_num=3",
            "env.init_args.num_envs (64) must split into model.init_args.rollout.pipeline_stage_num (3)",
        ),
    ],
)
def test_a_value_a_class_refuses_is_named_by_its_yaml_key(tmp_path, capsys, monkeypatch, flag, expected):
    """A class checks its own values and names them as it knows them; rlinf fit names the YAML key instead (a value
    a class does not take from the config, the env's action_dim here, keeps the class's name)."""
    monkeypatch.chdir(tmp_path)
    line = _one_error(*_fit(tmp_path, capsys, None, "--config", str(TOY), *FAST, f"--model.init_args.{flag}"))
    assert expected in line, line


def test_yaml_keys_are_found_by_section_and_name_and_only_when_unambiguous():
    from rlinf_core import GRPO
    from rlinf_core.cli.yaml_keys import yaml_key
    from rlinf_core.foundation.checks import ConfigValueError

    with pytest.raises(ConfigValueError) as caught:
        GRPO(update_epoch=0)
    assert str(caught.value).startswith("algorithm.update_epoch must be in [1, 1000], got 0")  # the class's name
    config = {
        "model": {
            "init_args": {
                "env": {"init_args": {"num_envs": 4, "world_model": {"init_args": {"action_dim": 3}}}},
                "eval_env": {"init_args": {"num_envs": 4}},
                "policy": {"init_args": {"actions": {"action_dim": None}}},
            }
        }
    }
    assert yaml_key(config, "env.action_dim", 3) == "model.init_args.env.init_args.world_model.init_args.action_dim"
    assert yaml_key(config, "policy.action_dim", 7) == "model.init_args.policy.init_args.actions.action_dim"
    assert yaml_key(config, "env.num_envs", 4) == "model.init_args.env.init_args.num_envs"
    assert yaml_key(config, "num_envs", 4) is None  # env's or eval_env's: not guessed
    assert yaml_key(config, "algorithm.update_epoch", 0) is None


# ------------------------------------------------------------------ RLinf's flat keys
def test_rlinf_flat_policy_keys_name_their_grouped_key(tmp_path, capsys, monkeypatch):
    """An RLinf-style flat key under an OpenVLA policy's init_args names its grouped key, in YAML and on the
    command line."""
    pytest.importorskip("rlinf_policy_openvla")
    monkeypatch.chdir(tmp_path)
    base = ROOT / "configs/openvla/reach_grpo_oft_tiny.yaml"
    line = _one_error(
        *_fit(
            tmp_path, capsys, None, "--config", str(base), *FAST, "--model.init_args.policy.init_args.unnorm_key=reach"
        )
    )
    assert "RLinf's flat unnorm_key is actions.unnorm_key" in line, line
    assert "--model.init_args.policy.init_args.actions.unnorm_key" in line, line
    cfg = yaml.safe_load(base.read_text())
    cfg["model"]["init_args"]["policy"]["init_args"]["num_images_in_input"] = 1
    line = _one_error(*_fit(tmp_path, capsys, cfg, *FAST))
    assert "RLinf's flat num_images_in_input is inputs.num_images_in_input" in line and "c0.yaml" in line, line
    pytest.importorskip("rlinf_policy_openpi")
    line = _one_error(
        *_fit(
            tmp_path,
            capsys,
            None,
            "--config",
            "metaworld/mt50_ppo_openpi_cpu_smoke.yaml",
            *FAST,
            "--model.init_args.policy.init_args.value_after_vlm=true",
        )
    )
    assert (
        "RLinf's flat value_after_vlm is critic.after_vlm in OpenPIPolicy: use --model.init_args.policy."
        "init_args.critic.after_vlm" in line
    ), line


@pytest.mark.parametrize(
    ("plugin", "config", "flat", "grouped"),
    [
        ("rlinf_env_libero", "libero/spatial_cpu_smoke.yaml", "reward_coef", "reward.coef"),  # RLinf's key
        ("rlinf_env_metaworld", "metaworld/quickstart_grpo.yaml", "camera_name", "render.camera_name"),  # our old key
        ("rlinf_env_maniskill", "maniskill/pickcube_cpu_smoke.yaml", "sim_backend", "sim.backend"),
    ],
)
def test_flat_env_keys_name_their_grouped_key(tmp_path, capsys, monkeypatch, plugin, config, flat, grouped):
    """The simulator envs group render / reward / sim settings; a flat key (RLinf's, or ours before the groups) in a
    YAML file or on the command line is one line naming the grouped key (through the env's FLAT_SETTINGS)."""
    pytest.importorskip(plugin)
    monkeypatch.chdir(tmp_path)
    cfg = yaml.safe_load((ROOT / "configs" / config).read_text())
    cfg["model"]["init_args"]["env"]["init_args"][flat] = cfg["model"]["init_args"]["env"]["init_args"].get(flat)
    line = _one_error(*_fit(tmp_path, capsys, cfg, *FAST))
    assert f"flat {flat} is {grouped} in " in line and "c0.yaml" in line, line
    assert f"model.init_args.env.init_args.{grouped}" in line, line
    line = _one_error(
        *_fit(tmp_path, capsys, None, "--config", config, *FAST, f"--model.init_args.env.init_args.{flat}=1")
    )
    assert f"use --model.init_args.env.init_args.{grouped}" in line, line


def test_an_env_num_workers_names_the_rl_loop_setting(tmp_path, capsys, monkeypatch):
    """The worker count left the Env contract for the vector layer: an env's num_workers (old configs) names
    rollout.env_workers, an eval env's rollout.eval_env_workers."""
    monkeypatch.chdir(tmp_path)
    line = _one_error(*_fit(tmp_path, capsys, _toy(), *FAST, "--model.init_args.env.init_args.num_workers=2"))
    assert "num_workers: its worker processes are --model.init_args.rollout.env_workers" in line, line
    cfg = _toy(model__init_args__eval_env={"class_path": "ReachEnv", "init_args": {"num_workers": 1}})
    line = _one_error(*_fit(tmp_path, capsys, cfg, *FAST))
    assert "--model.init_args.rollout.eval_env_workers" in line and "c1.yaml" in line, line
