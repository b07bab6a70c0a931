"""The MetaWorld learn-in-imagination example's world-model preparation (examples/metaworld_imagination)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("diffusers")


def prepare_module():
    path = ROOT / "examples/metaworld_imagination/prepare_world_model.py"
    spec = importlib.util.spec_from_file_location("prepare_world_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_latent_rescaling_keeps_reconstructions_and_scales_the_posterior():
    from diffusers import AutoencoderKL

    prep = prepare_module()
    torch.manual_seed(0)
    vae = AutoencoderKL(**prep.VAE, sample_size=32).eval()
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.mean).sample
        prep.rescale_latent(vae, 5.0)
        post2 = vae.encode(x).latent_dist
        rec2 = vae.decode(post2.mean).sample
    torch.testing.assert_close(post2.mean, 5.0 * post.mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(post2.std, 5.0 * post.std, rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(rec2, rec, rtol=1e-4, atol=1e-4)


def test_action_statistics_are_quantiles_and_never_degenerate():
    prep = prepare_module()
    actions = np.stack([np.linspace(-2, 2, 1001), np.zeros(1001)], 1).astype(np.float32)
    stats = prep.action_statistics(actions)["action"]
    assert stats["q01"][0] == pytest.approx(-1.96) and stats["q99"][0] == pytest.approx(1.96)
    assert (stats["q01"][1], stats["q99"][1]) == (-1.0, 1.0)  # a constant dimension: no division by zero


def test_the_loop_loads_and_its_example_configs_parse(capsys):
    from rlinf_core.cli.coevolve import load_loop
    from rlinf_core.cli.configs import resolve_config_args
    from rlinf_core.cli.main import main

    pytest.importorskip("rlinf_wm_opensora")
    pytest.importorskip("rlinf_env_metaworld")
    spec = load_loop(ROOT / "examples/metaworld_imagination/loop.yaml")
    assert [s.name for s in spec.stages] == ["world_model", "reward_model", "rl", "collect"]
    for stage in spec.prelude + spec.stages:
        for name in stage.config:
            assert Path(resolve_config_args(["--config", name])[1]).is_file(), (stage.name, name)
    for name in ("world_model_fit", "reward_model_fit", "grpo_in_world_model"):
        with pytest.raises(SystemExit) as exc:
            main(["fit", "--config", str(ROOT / f"examples/metaworld_imagination/{name}.yaml"), "--print_config"])
        assert exc.value.code in (0, None), capsys.readouterr().err[-2000:]
