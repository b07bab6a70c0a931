"""The MetaWorld learn-in-imagination example's world-model preparation (examples/metaworld_imagination)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

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


def test_motion_weight_makes_the_moving_pixels_count():
    prep = prepare_module()
    pairs = torch.zeros(1, 2, 3, 8, 8) - 1
    pairs[0, 1, :, 2:4, 2:4] = 1  # a 2x2 "arm" appears in the second frame
    mask = prep.motion_mask(pairs)
    assert mask.shape == (1, 1, 1, 8, 8) and mask.sum() == 4 and mask[0, 0, 0, 2:4, 2:4].all()
    x = pairs[0]
    rec = x.clone()
    rec[1, :, 2:4, 2:4] = 0  # the reconstruction misses the arm (error 1 on 4 of 64 pixels)
    m = mask.expand(-1, 2, -1, -1, -1).flatten(0, 1)
    plain = prep.reconstruction_loss(rec, x, m, 0.0)
    weighted = prep.reconstruction_loss(rec, x, m, 10.0)
    assert plain.item() == pytest.approx(4 * 3 / (2 * 3 * 64))
    assert weighted.item() == pytest.approx(11 * 4 * 3 / (3 * (2 * 64 + 10 * 2 * 4)))  # both frames weigh the mask
    assert weighted > 5 * plain


def test_vae_floor_measures_reconstruction_against_one_step_of_motion():
    from diffusers import AutoencoderKL

    prep = prepare_module()
    torch.manual_seed(0)
    vae = AutoencoderKL(**prep.vae_config(8), sample_size=16).eval()
    assert vae.config.latent_channels == 8 and vae.encode(torch.zeros(1, 3, 16, 16)).latent_dist.mean.shape[1] == 8
    pairs = np.zeros((3, 2, 16, 16, 3), np.uint8)
    pairs[:, 1, :4, :4] = 255  # 16 of 256 pixels change by 1.0 in every channel
    floor = prep.vae_floor(vae, pairs, batch=2)
    assert floor["motion_mse"] == pytest.approx(16 / 256) and floor["motion_mse_moving"] == pytest.approx(1.0)
    assert floor["moving_fraction"] == pytest.approx(16 / 256)
    with torch.no_grad():
        x1 = torch.from_numpy(pairs[:, 1]).permute(0, 3, 1, 2).float() / 127.5 - 1
        rec = vae.decode(vae.encode(x1).latent_dist.mean).sample.clamp(-1, 1)
    assert floor["reconstruction_mse"] == pytest.approx((((rec - x1) / 2) ** 2).mean().item(), rel=1e-4)


def test_frame_pairs_are_consecutive_frames_of_each_episode():
    from rlinf_core.world_models.datasets import Episode

    prep = prepare_module()
    frames = np.arange(4, dtype=np.uint8)[:, None, None, None].repeat(2, 1).repeat(2, 2).repeat(3, 3)
    ep = Episode(frames, np.zeros((4, 2), np.float32), np.zeros(4, bool), "x", False)
    pairs = prep.frame_pairs([ep, ep])
    assert pairs.shape == (6, 2, 2, 2, 3) and (pairs[:, 1, 0, 0, 0] - pairs[:, 0, 0, 0, 0] == 1).all()


def test_the_vae_trains_for_a_time_budget():
    prep = prepare_module()
    assert prep.steps_in(10.0, elapsed=2.0, done=20) == 100
    assert prep.steps_in(1.0, elapsed=5.0, done=20) == 20  # never fewer than the steps already trained
    pairs = np.random.default_rng(0).integers(0, 256, (8, 2, 16, 16, 3), dtype=np.uint8)
    vae, mse, steps = prep.train_vae(pairs, steps=0, batch=4, lr=1e-3, seed=0, seconds=1e-3)
    assert steps == 20 and np.isfinite(mse)  # the budget was spent by the timed steps: training stops there
    _, _, fixed = prep.train_vae(pairs, steps=3, batch=4, lr=1e-3, seed=0)
    assert fixed == 3 and next(vae.parameters()).device.type == "cpu"
