"""LeRobot's own π0 / π0.5 policy directories (``lerobot_pi0/``, ``lerobot_pi05/``: lerobot 0.4.4's
``PI0Policy`` / ``PI05Policy.save_pretrained`` and its processors' ``save_pretrained``, written by make_lerobot.py; see
README.md) loaded as a user loads them: ``rlinf serve --policy DIR --policy-class OpenPIPolicy`` and a YAML
``model_path``: every tensor lerobot wrote is the one rlinf holds, the statistics are lerobot's normalizer's, and
the model's flow (same inputs, same noise) gives the actions lerobot's own ``sample_actions`` gave
(``<name>_reference.safetensors``, float32)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.loading import LoadOptions, load_policy

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

HERE = Path(__file__).resolve().parent
TOKENIZER = HERE / "openpi_pi0" / "paligemma_tokenizer.model"
EXPERT_LM_HEAD = "paligemma_with_expert.gemma_expert.lm_head.weight"  # in lerobot's file, never used
# What lerobot's config.json cannot say: the vocabulary and SigLIP sizes of make_lerobot.py's shrunken build
# (a full-size lerobot checkpoint has rlinf's defaults, 257152 and So400m). The Gemma sizes are named by the
# variant, openpi's "dummy"; the image size by lerobot's image_resolution.
TINY_SIZES = {"vocab_size": 320, "dims": {"vision": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 2}}}


def _with_sizes(name: str, tmp_path: Path) -> Path:
    model = tmp_path / name
    shutil.copytree(HERE / name, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **TINY_SIZES}))
    return model


@pytest.mark.parametrize("name", ["lerobot_pi0", "lerobot_pi05"])
def test_lerobot_save_pretrained_loads_with_lerobots_tensors_and_statistics(name, tmp_path):
    from jsonargparse import ArgumentParser
    from safetensors import safe_open
    from safetensors.torch import load_file

    from rlinf_core.serve.command import parse_settings
    from rlinf_core.testing.numerics import assert_close_reordered
    from rlinf_policy_openpi.policy import OpenPIPolicy

    model = _with_sizes(name, tmp_path)
    with safe_open(str(model / "model.safetensors"), framework="pt") as f:
        assert f.metadata()  # save_model's record of the dropped tied name
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenPIPolicy, "policy")
    args = [f"--policy.model_path={model}", f"--policy.inputs.tokenizer_path={TOKENIZER}"]
    policy = parser.instantiate(parser.parse_args(args)).policy
    settings = parse_settings([f"inputs.tokenizer_path={TOKENIZER}"])
    served = load_policy(str(model), LoadOptions(policy_class="OpenPIPolicy", settings=settings)).policy
    assert policy.openpi.config.pi05 == (name == "lerobot_pi05")

    weights = load_file(str(model / "model.safetensors"))
    (stats_file,) = model.glob("policy_preprocessor_step_*_normalizer_processor.safetensors")
    stats = load_file(str(stats_file))
    gen = torch.Generator().manual_seed(0)
    obs = Observation(
        main_images=torch.randint(0, 256, (2, 32, 32, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["press the button"] * 2,
        states=torch.randn(2, 4, generator=gen),
    )
    for built in (policy, served):
        state = built.openpi.state_dict()
        names = {k: k.removeprefix("model.") for k in weights}
        absent = [k for k, ours in names.items() if ours not in state]
        assert absent == [f"model.{EXPERT_LM_HEAD}"]
        assert all(torch.equal(state[names[k]].float(), v.float()) for k, v in weights.items() if k not in absent)
        for group, key in (("state", "observation.state"), ("actions", "action")):
            for field in ("mean", "std", "q01", "q99"):
                assert torch.allclose(getattr(built.inputs.stats[group], field), stats[f"{key}.{field}"].float())
    ref = load_file(str(HERE / f"{name}_reference.safetensors"))
    with torch.no_grad():
        ours = policy.openpi.sample_actions(
            [ref["image"]], [ref["image_mask"]], ref["tokens"], ref["token_mask"], ref.get("state"), 3, ref["noise"]
        )
    # float32 summation order (rlinf's attention vs transformers'), through 3 Euler steps of the tiny π0's passes:
    # sums of <= 588 terms (a SigLIP patch), ~100 in a row per pass (SigLIP 2 layers, Gemma and expert 4 each, of ~9
    # sums, plus embeddings and projections); measured 6.6e-5 at |a| up to 4
    assert_close_reordered(ours, ref["actions"], n=588, depth=3 * 100)
    out = policy.act(obs, do_sample=False)
    assert out.actions.shape[:2] == (2, 5) and torch.isfinite(out.actions).all()
