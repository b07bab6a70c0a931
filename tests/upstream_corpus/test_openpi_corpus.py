"""openpi's own checkpoints (``openpi_pi0/``, ``openpi_pi05/``, written by make_openpi.py with openpi's writers: see
README.md) loaded the ways a user loads them: ``rlinf validate`` with the directory as the YAML ``model_path``, and
``rlinf serve --policy``'s loader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from rlinf_core.contracts.observation import Observation
from rlinf_core.serve.loading import LoadOptions, load_policy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
OPENPI_DIRS = ["openpi_pi0", "openpi_pi05"]


@pytest.mark.parametrize("name", OPENPI_DIRS)
def test_save_model_output_is_what_openpi_writes(name):
    """The file is safetensors.torch.save_model's: the tie in the metadata, one of the two names dropped, no
    "format" key (what made huggingface_hub's loader refuse it)."""
    from safetensors import safe_open

    with safe_open(str(HERE / name / "model.safetensors"), framework="pt") as f:
        assert f.metadata() == {EMBED: LM_HEAD} and EMBED not in set(f.keys())


@pytest.mark.parametrize("name", OPENPI_DIRS)
def test_serve_loads_openpi_checkpoints_with_the_tie_and_openpi_statistics(name):
    from safetensors.torch import load_file

    policy = load_policy(str(HERE / name), LoadOptions(policy_class="OpenPIPolicy")).policy
    weights = load_file(str(HERE / name / "model.safetensors"))
    state = policy.openpi.state_dict()
    assert torch.equal(state[EMBED], weights[LM_HEAD]) and torch.equal(state[LM_HEAD], weights[LM_HEAD])
    shared = [k for k in weights if k in state]
    assert len(shared) == len(weights) and all(torch.equal(state[k], weights[k]) for k in shared)
    stats = json.loads((HERE / name / "assets" / "tiny" / "metaworld" / "norm_stats.json").read_text())["norm_stats"]
    for ours, key in ((policy.inputs.stats["state"], "state"), (policy.inputs.stats["actions"], "actions")):
        for field in ("mean", "std", "q01", "q99"):
            assert torch.allclose(getattr(ours, field), torch.tensor(stats[key][field]))
    gen = torch.Generator().manual_seed(0)
    obs = Observation(
        main_images=torch.randint(0, 256, (2, 32, 32, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["press the button"] * 2,
        states=torch.randn(2, 4, generator=gen),
    )
    out = policy.act(obs, do_sample=False)
    assert out.actions.shape == (2, 5, 4) and torch.isfinite(out.actions).all()


@pytest.mark.slow
def test_rlinf_validate_runs_on_openpi_checkpoint_as_yaml_model_path(tmp_path):
    """configs/metaworld/mt50_ppo_openpi_cpu_smoke.yaml with the corpus' π0 as its model_path: one short eval pass
    on the real MetaWorld simulator (about 10 s)."""
    from rlinf_core.cli.main import main

    os.environ.setdefault("MUJOCO_GL", "egl")
    ev = "--model.init_args.eval_env.init_args."
    try:
        main(
            [
                "validate",
                "--config",
                str(ROOT / "configs" / "metaworld" / "mt50_ppo_openpi_cpu_smoke.yaml"),
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                f"--trainer.default_root_dir={tmp_path}",
                f"--model.init_args.policy.init_args.model_path={HERE / 'openpi_pi0'}",
                "--model.init_args.rollout.show_progress=false",
                f"{ev}max_episode_steps=5",
                f"{ev}trials_per_task=1",
                f"{ev}num_envs=1",
            ]
        )
    except SystemExit as exc:  # LightningCLI exits 0 after validate
        assert exc.code in (0, None)
    (result,) = tmp_path.rglob("eval_epoch0.json")
    assert json.loads(result.read_text())["metrics"]["eval/num_trajectories"] == 1.0


def test_rlinf_v03_export_of_pi0_loads_as_the_model_it_exported():
    """rlinf_pi0_export/ (RLinf v0.3's convertor on openpi_pi0 + a PPO value head): every tensor in one shard, both
    tied names, no tokenizer (RLinf copies only *.py / *.json / *.md), so a YAML names it; same actions as the
    openpi-layout checkpoint the weights came from, and RLinf's value head loaded."""
    from jsonargparse import ArgumentParser
    from safetensors.torch import load_file

    from rlinf_policy_openpi.policy import OpenPIPolicy

    export = HERE / "rlinf_pi0_export"
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenPIPolicy, "policy")
    args = [
        f"--policy.model_path={export}",
        f"--policy.inputs.tokenizer_path={HERE / 'openpi_pi0'}/paligemma_tokenizer.model",
        "--policy.num_steps=3",
    ]
    policy = parser.instantiate(parser.parse_args(args)).policy
    assert policy.has_value_head
    weights = load_file(str(export / "model-00001-of-00001.safetensors"))
    head = policy.openpi.value_head.state_dict()
    assert all(
        torch.equal(head[k.removeprefix("value_head.")], v) for k, v in weights.items() if k.startswith("value_head.")
    )
    original = OpenPIPolicy(model_path=str(HERE / "openpi_pi0"), num_steps=3)
    gen = torch.Generator().manual_seed(0)
    obs = Observation(
        main_images=torch.randint(0, 256, (2, 32, 32, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["press the button"] * 2,
        states=torch.randn(2, 4, generator=gen),
    )
    assert torch.equal(policy.act(obs, do_sample=False).actions, original.act(obs, do_sample=False).actions)
    assert torch.isfinite(policy.value(obs)).all()
    # rlinf serve --policy on the same export, its tokenizer given with --set: the same actions
    from rlinf_core.serve.command import parse_settings

    tokenizer = f"{HERE / 'openpi_pi0'}/paligemma_tokenizer.model"
    settings = parse_settings([f"inputs.tokenizer_path={tokenizer}", "num_steps=3"])
    served = load_policy(str(export), LoadOptions(policy_class="OpenPIPolicy", settings=settings)).policy
    assert torch.equal(served.act(obs, do_sample=False).actions, policy.act(obs, do_sample=False).actions)


def test_serve_set_is_refused_in_one_line_when_malformed_or_unknown():
    from rlinf_core.serve.command import parse_settings
    from rlinf_core.serve.errors import ServeError

    for bad in ("inputs.tokenizer_path", "=3", "a b=1", "x=[1,"):
        with pytest.raises(ServeError, match="--set"):
            parse_settings([bad])
    with pytest.raises(ServeError, match="has no setting no_such_setting"):
        load_policy(str(HERE / "openpi_pi0"), LoadOptions(policy_class="OpenPIPolicy", settings={"no_such_setting": 1}))
    with pytest.raises(ServeError, match="--set: .*unexpected keyword argument 'nope'"):
        load_policy(str(HERE / "openpi_pi0"), LoadOptions(policy_class="OpenPIPolicy", settings={"inputs.nope": 1}))
