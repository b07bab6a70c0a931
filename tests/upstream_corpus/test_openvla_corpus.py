"""openvla/openvla's own Hugging Face checkpoint (``openvla_hf/``: its HF modeling / processing code under the
versions it pins saved it, and ran its processor and ``predict_action`` for ``reference.json``; see README.md)
loaded as a user loads it, compared with that reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.loading import LoadOptions, load_policy

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

DIR = Path(__file__).resolve().parent / "openvla_hf"
REF = json.loads((DIR / "reference.json").read_text())
LLAMA_SPACE = 29871  # predict_action appends it to every prompt


def _obs() -> Observation:
    image = torch.from_numpy(np.asarray(Image.open(DIR / REF["image"]).convert("RGB"))).unsqueeze(0)
    return Observation(main_images=image, task_descriptions=[REF["task"]])


def _from_yaml():
    from jsonargparse import ArgumentParser

    from rlinf_policy_openvla import OpenVLAPolicy

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenVLAPolicy, "policy")
    return parser.instantiate(parser.parse_args([f"--policy.model_path={DIR}"])).policy


@pytest.fixture(scope="module")
def routes():
    """The policy as ``rlinf serve --policy DIR`` loads it (class from config.json's model_type) and as a YAML
    ``model_path`` builds it."""
    return {"serve": load_policy(str(DIR), LoadOptions()).policy, "yaml": _from_yaml()}


@pytest.mark.parametrize("route", ["serve", "yaml"])
def test_openvla_hf_checkpoint_acts_as_upstream_predict_action(routes, route):
    policy = routes[route]
    assert type(policy).__name__ == "OpenVLAPolicy" and policy.unnorm_key == REF["unnorm_key"]
    assert policy.image_resize == "pil"  # decided from its preprocessor_config.json
    assert policy.prompts.ids(REF["task"]) == REF["input_ids"] + [LLAMA_SPACE]
    actions = policy.act(_obs(), do_sample=False).actions
    # greedy actions are bin centres (equal unless two logits tie within rounding), unnormalised in float32 against
    # upstream's float64: ~5 roundings of 2^-24 on values <= 2, far below 1e-5
    assert torch.allclose(actions.reshape(-1).double(), torch.tensor(REF["actions"], dtype=torch.float64), atol=1e-5)


def test_openvla_hf_pixels_equal_upstream_processor(routes):
    from rlinf_policy_openvla.processing import pixel_values

    policy = routes["serve"]
    spec = policy.spec

    def pixels(resize):
        return pixel_values(
            [_obs().main_images],
            spec.vision[0].image_size,
            spec.image_means,
            spec.image_stds,
            crop=False,
            resize=resize,
            strategy=spec.image_resize_strategy,
            fill=spec.letterbox_fill,
        )[0][:, ::16, ::16]

    reference = torch.tensor(REF["pixel_values_strided"])
    assert torch.equal(pixels(policy.image_resize), reference)
    assert not torch.allclose(pixels("tensor"), reference, atol=1e-3)  # what the name-based default gave it


def test_official_oft_side_files_load_into_the_proprio_projector(tmp_path):
    """openvla_oft_side/ (moojink/openvla-oft's finetune.py writer: DDP ``module.`` keys, action head in bfloat16)
    beside the openvla_hf weights, as an official OFT export holds them, built as a YAML model_path builds it."""
    import shutil

    from jsonargparse import ArgumentParser

    from rlinf_policy_openvla import OpenVLAOFTPolicy
    from rlinf_policy_openvla.released import default_image_resize

    model = tmp_path / "oft"
    shutil.copytree(DIR, model)
    for side in (DIR.parent / "openvla_oft_side").iterdir():
        shutil.copy(side, model / side.name)
    assert default_image_resize(model)[0] == "pil"
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenVLAOFTPolicy, "policy")
    args = [f"--policy.model_path={model}", "--policy.inputs.use_proprio=true", "--policy.inputs.proprio_dim=8"]
    policy = parser.instantiate(parser.parse_args(args)).policy
    saved = torch.load(model / "proprio_projector--100_checkpoint.pt", map_location="cpu", weights_only=True)
    loaded = policy.vla.proprio_projector.state_dict()
    assert sorted(loaded) == sorted(k.removeprefix("module.") for k in saved)
    assert all(torch.equal(loaded[k.removeprefix("module.")].float(), v.float()) for k, v in saved.items())


def test_rlinf_v03_export_of_openvla_oft_loads_as_the_model_it_exported():
    """rlinf_openvla_oft_export/ (RLinf v0.3's convertor on openvla_hf, bfloat16, plus RLinf's OFT PPO value head; see
    make_rlinf_exports.py) as a YAML ``model_path`` and ``rlinf serve --policy-class OpenVLAOFTPolicy`` build it, with
    no ``add_value_head`` given: RLinf's critic is loaded (8 outputs: ``action_level``), and the actions are those of
    ``openvla_hf/``, whose tensors the export holds."""
    from jsonargparse import ArgumentParser
    from safetensors.torch import load_file

    from rlinf_policy_openvla import OpenVLAOFTPolicy

    export = DIR.parent / "rlinf_openvla_oft_export"
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenVLAOFTPolicy, "policy")
    policy = parser.instantiate(parser.parse_args([f"--policy.model_path={export}"])).policy
    served = load_policy(str(export), LoadOptions(policy_class="OpenVLAOFTPolicy")).policy
    weights = load_file(str(export / "model-00001-of-00001.safetensors"))
    saved = {k.removeprefix("value_head."): v for k, v in weights.items() if k.startswith("value_head.")}
    for built in (policy, served):
        assert built.has_value_head and built.value_type == "action_level" and built.image_resize == "pil"
        head = built.vla.value_head.state_dict()
        assert len(saved) == 5 and all(torch.equal(head[k].float(), v.float()) for k, v in saved.items())
    obs = _obs()
    original = OpenVLAOFTPolicy(model_path=str(DIR)).act(obs, do_sample=False).actions
    assert torch.equal(policy.act(obs, do_sample=False).actions, original)
    assert torch.equal(served.act(obs, do_sample=False).actions, original)
    assert policy.value(obs).shape == (1, 8) and torch.isfinite(policy.value(obs)).all()
