"""Precision: bf16 weights as upstream (on CUDA under ``auto``), fp32 on CPU; the CUDA test runs where a GPU is."""

import numpy as np
import pytest
import torch

from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.world_models.reward_models import ResnetRewardModel
from rlinf_wm_wan import WanWorldModel


def _frames(model, batch=2):
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (batch, 5, 64, 64, 3), generator=gen, dtype=torch.uint8)
    return model.init_state(frames, torch.zeros(batch, 5, 7))


def test_bf16_weights_give_frames_close_to_fp32(tiny_wan):
    bf16 = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=2, precision="bf16").to("cpu")
    fp32 = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=2).to("cpu")  # auto on CPU
    assert bf16.dit.dtype == bf16.vae.dtype == torch.bfloat16 and fp32.dit.dtype == torch.float32
    assert all(p.dtype == torch.bfloat16 for p in bf16.dit.parameters())  # no fp32 islands, as upstream
    acts = torch.zeros(2, 8, 7)
    a, _ = bf16.predict(_frames(bf16), acts)
    b, _ = fp32.predict(_frames(fp32), acts)
    assert a.dtype == torch.uint8 and (a.float() - b.float()).abs().mean() < 3.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_auto_precision_runs_bf16_on_cuda_inside_the_env(tiny_wan):
    model = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=5)
    rm = ResnetRewardModel(str(tiny_wan / "resnet_rm.pth"))
    env = WorldModelEnv(
        model, rm, str(tiny_wan / "dataset"), num_envs=4, max_episode_steps=16, enable_kir=True, device="cuda"
    )
    assert model.dit.dtype == torch.bfloat16 and model.device.type == "cuda"
    env.reset(reset_state_ids=np.array([0, 1, 2, 3]))
    out = env.chunk_step(torch.rand(4, 8, 7) * 2 - 1)
    assert out.obs.main_images.device.type == "cuda" and out.obs.main_images.dtype == torch.uint8
    env.set_device("cpu")
    assert model.dit.dtype == torch.float32
