"""One policy whichever way a saved directory is loaded (issue 33, finding 4): a YAML ``model_path`` (jsonargparse
instantiating the class, as ``rlinf fit`` / ``rlinf validate`` do), ``from_pretrained`` and ``rlinf serve``'s loader
restore the same settings, through :class:`rlinf_core.models.settings.SavedSettings`."""

from __future__ import annotations

import pytest
import torch
from jsonargparse import ArgumentParser

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.loading import LoadOptions, load_policy
from rlinf_policy_openpi.policy import OpenPIPolicy
from rlinf_policy_openpi.settings import CriticConfig, NoiseConfig

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _from_yaml(model_path, *extra: str) -> OpenPIPolicy:
    """The policy a YAML ``policy: {class_path: OpenPIPolicy, init_args: {model_path: ...}}`` builds."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenPIPolicy, "policy")
    cfg = parser.parse_args([f"--policy.model_path={model_path}", *extra])
    return parser.instantiate(cfg).policy


def _obs(B=2):
    gen = torch.Generator().manual_seed(1)
    return Observation(
        main_images=torch.randint(0, 256, (B, 32, 32, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["press the button"] * B,
        states=torch.randn(B, 4, generator=gen),
    )


def test_every_route_to_a_saved_directory_gives_the_same_policy(tiny, tmp_path):
    base = tiny(pi05=True, layout="rlinf", max_token_len=48)
    trained = OpenPIPolicy.from_pretrained(
        base,
        num_action_chunks=2,
        num_steps=3,
        add_value_head=True,
        noise=NoiseConfig(method="flow_noise", logvar_range=(0.1, 0.2)),
        critic=CriticConfig(after_vlm=True, vlm_mode="last_token", detach_input=True),
    )
    trained.save_pretrained(tmp_path / "export")

    yaml = _from_yaml(tmp_path / "export")
    pretrained = OpenPIPolicy.from_pretrained(tmp_path / "export")
    served = load_policy(str(tmp_path / "export"), LoadOptions()).policy  # the class comes from config.json
    for policy in (yaml, pretrained, served):
        assert (policy.noise_method, policy.num_action_chunks, policy.num_steps) == ("flow_noise", 2, 3)
        assert policy.value_after_vlm and policy.value_vlm_mode == "last_token" and policy.detach_critic_input
    assert all(policy.settings() == trained.settings() for policy in (yaml, pretrained, served))
    obs = _obs()
    expected = trained.eval().act(obs, do_sample=False)
    for policy in (yaml, pretrained, served):
        got = policy.eval().act(obs, do_sample=False)
        # the same weights and code on the same observation, in one process: equal on any CPU
        assert torch.equal(got.actions, expected.actions) and torch.equal(got.values, expected.values)


def test_a_setting_given_wins_over_the_recorded_one_on_every_route(tiny, tmp_path):
    base = tiny(pi05=False, layout="rlinf", max_token_len=24)
    OpenPIPolicy.from_pretrained(base, num_action_chunks=2, num_steps=3).save_pretrained(tmp_path / "export")

    yaml = _from_yaml(tmp_path / "export", "--policy.num_action_chunks=4", "--policy.num_steps=10")
    pretrained = OpenPIPolicy.from_pretrained(tmp_path / "export", num_action_chunks=4, num_steps=10)
    served = load_policy(str(tmp_path / "export"), LoadOptions(num_action_chunks=4)).policy
    assert (yaml.num_action_chunks, yaml.num_steps) == (pretrained.num_action_chunks, pretrained.num_steps) == (4, 10)
    assert (served.num_action_chunks, served.num_steps) == (4, 3)  # serve sets chunks only; steps stay recorded
