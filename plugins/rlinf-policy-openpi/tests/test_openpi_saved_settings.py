"""One policy whichever way a saved directory is loaded: a YAML ``model_path`` (jsonargparse instantiating the class,
as ``rlinf fit`` / ``rlinf validate`` do), ``from_pretrained`` and ``rlinf serve``'s loader restore the same settings,
through :class:`rlinf_core.models.settings.SavedSettings`."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from jsonargparse import ArgumentParser

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.loading import LoadOptions, load_policy
from rlinf_policy_openpi.policy import OpenPIPolicy
from rlinf_policy_openpi.settings import CriticConfig, NoiseConfig

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

FIXTURES = Path(__file__).parent / "fixtures"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenPIPolicy, "policy")
    return parser


def _from_yaml(model_path, *extra: str) -> OpenPIPolicy:
    """The policy a YAML ``policy: {class_path: OpenPIPolicy, init_args: {model_path: ...}}`` builds."""
    parser = _parser()
    return parser.instantiate(parser.parse_args([f"--policy.model_path={model_path}", *extra])).policy


def _obs(B=2):
    gen = torch.Generator().manual_seed(1)
    return Observation(
        main_images=torch.randint(0, 256, (B, 32, 32, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["press the button"] * B,
        states=torch.randn(B, 4, generator=gen),
    )


def _trained(tiny) -> OpenPIPolicy:
    return OpenPIPolicy.from_pretrained(
        tiny(pi05=True, layout="rlinf", max_token_len=48),
        num_action_chunks=2,
        num_steps=3,
        add_value_head=True,
        noise=NoiseConfig(method="flow_noise", logvar_range=(0.1, 0.2)),
        critic=CriticConfig(after_vlm=True, vlm_mode="last_token", detach_input=True),
    )


def _same_policy(policies, trained) -> None:
    for policy in policies:
        assert (policy.noise_method, policy.num_action_chunks, policy.num_steps) == ("flow_noise", 2, 3)
        assert policy.value_after_vlm and policy.value_vlm_mode == "last_token" and policy.detach_critic_input
        assert policy.noise_logvar_range == (0.1, 0.2)
    obs = _obs()
    expected = trained.eval().act(obs, do_sample=False)
    for policy in policies:
        got = policy.eval().act(obs, do_sample=False)
        # the same weights and code on the same observation, in one process: equal on any CPU
        assert torch.equal(got.actions, expected.actions) and torch.equal(got.values, expected.values)


def test_every_route_to_a_saved_directory_gives_the_same_policy(tiny, tmp_path):
    trained = _trained(tiny)
    trained.save_pretrained(tmp_path / "export")

    yaml = _from_yaml(tmp_path / "export")
    pretrained = OpenPIPolicy.from_pretrained(tmp_path / "export")
    served = load_policy(str(tmp_path / "export"), LoadOptions()).policy  # the class comes from config.json
    _same_policy((yaml, pretrained, served), trained)
    assert all(policy.settings_record() == trained.settings_record() for policy in (yaml, pretrained, served))


def test_the_record_is_the_constructor_arguments_under_one_key(tiny, tmp_path):
    trained = _trained(tiny)
    trained.save_pretrained(tmp_path / "export")
    record = json.loads((tmp_path / "export" / "config.json").read_text())["rlinf"]
    assert record["class"] == "OpenPIPolicy"
    assert set(record) == {"class", "action_dim", "num_action_chunks", "num_steps", "add_value_head", "noise"} | {
        "critic",
        "inputs",
        "train_expert_only",
    }  # model_path, lora, precision and gradient_checkpointing are how this run holds the weights: not recorded
    noise = NoiseConfig(method="flow_noise", logvar_range=(0.1, 0.2))
    assert record["noise"] == json.loads(json.dumps(dataclasses.asdict(noise)))  # every field, tuples as lists
    assert record["inputs"]["image_resize"] == "pil"  # resolved from the source layout, recorded for the reload


def test_print_config_shows_the_real_defaults():
    defaults = _parser().get_defaults().policy
    assert defaults.num_steps == 10 and defaults.train_expert_only is True
    assert defaults.noise.method == "flow_sde" and defaults.noise.level == 0.5
    assert defaults.critic.vlm_mode == "mean_token" and defaults.inputs.num_images_in_input == 1


def test_a_setting_given_wins_over_the_recorded_one_on_every_route(tiny, tmp_path):
    base = tiny(pi05=False, layout="rlinf", max_token_len=24)
    OpenPIPolicy.from_pretrained(base, num_action_chunks=2, num_steps=3).save_pretrained(tmp_path / "export")

    yaml = _from_yaml(tmp_path / "export", "--policy.num_action_chunks=4", "--policy.num_steps=7")
    pretrained = OpenPIPolicy.from_pretrained(tmp_path / "export", num_action_chunks=4, num_steps=7)
    served = load_policy(str(tmp_path / "export"), LoadOptions(num_action_chunks=4)).policy
    assert (yaml.num_action_chunks, yaml.num_steps) == (pretrained.num_action_chunks, pretrained.num_steps) == (4, 7)
    assert (served.num_action_chunks, served.num_steps) == (4, 3)  # serve sets chunks only; steps stay recorded
    # the default value: from_pretrained's override wins; a YAML value equal to the default is the default, which
    # the recorded setting replaces (jsonargparse passes every default, so the two cannot be told apart)
    assert OpenPIPolicy.from_pretrained(tmp_path / "export", num_steps=10).num_steps == 10
    assert _from_yaml(tmp_path / "export", "--policy.num_steps=10").num_steps == 3


def test_a_group_field_given_wins_and_the_other_fields_stay_recorded(tiny, tmp_path):
    _trained(tiny).save_pretrained(tmp_path / "export")
    yaml = _from_yaml(tmp_path / "export", "--policy.critic.vlm_mode=first_token")
    pretrained = OpenPIPolicy.from_pretrained(tmp_path / "export", critic={"vlm_mode": "first_token"})
    flat = OpenPIPolicy.from_pretrained(tmp_path / "export", value_vlm_mode="first_token")  # RLinf's flat name
    for policy in (yaml, pretrained, flat):
        assert policy.value_vlm_mode == "first_token" and policy.value_after_vlm and policy.detach_critic_input


def test_a_directory_saved_before_the_settings_recorded_themselves_loads_the_same(tiny, tmp_path):
    """``fixtures/saved_pi05_config.json`` is the ``config.json`` that ``save_pretrained`` wrote for ``_trained``'s
    policy before the constructor recorded its own arguments (the settings were then listed by hand, the class name
    under ``policy``): such a directory loads with the settings it recorded."""
    trained = _trained(tiny)
    trained.save_pretrained(tmp_path / "export")
    shutil.copy(FIXTURES / "saved_pi05_config.json", tmp_path / "export" / "config.json")
    yaml = _from_yaml(tmp_path / "export")
    pretrained = OpenPIPolicy.from_pretrained(tmp_path / "export")
    served = load_policy(str(tmp_path / "export"), LoadOptions()).policy
    _same_policy((yaml, pretrained, served), trained)
