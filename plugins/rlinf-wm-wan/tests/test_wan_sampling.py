"""Upstream's flow-matching grids, the KIR resets and the chunk queue update, the training loss."""

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from rlinf_core.envs.world_model_env import WorldModelEnv
from rlinf_core.testing.numerics import reorder_rtol
from rlinf_core.world_models.init_data import load_init_trajectory
from rlinf_core.world_models.reward_models import ResnetRewardModel
from rlinf_wm_wan import WanWorldModel
from rlinf_wm_wan.sampling import inference_scheduler, training_grid

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def test_five_step_grid_is_upstreams():
    scheduler = inference_scheduler(5)
    upstream = torch.tensor([1000.0, 952.381, 882.3529, 769.2308, 555.5556])  # upstream's, to 7 digits
    torch.testing.assert_close(scheduler.timesteps, upstream, rtol=0, atol=1e-3)  # the digits given: <= 5e-4
    assert scheduler.sigmas[-1] == 0.0 and len(scheduler.sigmas) == 6
    plain = FlowMatchEulerDiscreteScheduler(shift=5.0)
    plain.set_timesteps(5)  # diffusers' own spacing is not upstream's
    assert plain.timesteps[-1] < 30 and not torch.allclose(plain.timesteps, scheduler.timesteps)
    assert inference_scheduler(3).timesteps.round().tolist() == [1000.0, 909.0, 714.0]
    with pytest.raises(ValueError, match=">= 1"):
        inference_scheduler(0)


def test_training_grid_and_weights_are_upstreams():
    t, sigma, w = training_grid()
    # (the tolerances: half a unit of the last digit given)
    assert len(t) == 1000 and t[0] == 1000.0 and t[-1] == pytest.approx(4.98, abs=0.005)  # extra_one_step: no 0
    assert sigma[950] == pytest.approx(0.2083, abs=5e-5)  # the context latent's light noise
    # a bell over the timestep value, peaking at t = 500 (index 833 of the shifted grid), zero at t = 1000
    # normalised to mean 1: a float32 mean of 1000 weights of size <= 2.5 (reorder_rtol(1000) of that)
    assert w.mean().item() == pytest.approx(1.0, abs=reorder_rtol(1000) * 2.5) and w[0] == 0.0
    assert w.argmax() == (t - 500).abs().argmin() == 833


def _env(tiny, enable_kir, num_envs=2):
    model = WanWorldModel(model_path=str(tiny), num_inference_steps=2)
    rm = ResnetRewardModel(str(tiny / "resnet_rm.pth"))
    data = str(tiny / "dataset")
    return WorldModelEnv(model, rm, data, num_envs=num_envs, max_episode_steps=16, enable_kir=enable_kir)


def test_kir_and_plain_resets_start_from_different_condition_frames(tiny_wan):
    plain, kir = _env(tiny_wan, False), _env(tiny_wan, True)
    assert plain.num_reset_states == 4 and kir.num_reset_states == 8
    assert all(not f.stem.endswith("_kir") for f in plain.files)
    # sorted files: traj0.npy, traj0_kir.npy, ...: reset state 1 of the KIR env is traj0_kir.npy
    plain.reset(reset_state_ids=np.array([0, 0]))
    kir.reset(reset_state_ids=np.array([0, 1]))
    traj = load_init_trajectory(tiny_wan / "dataset" / "traj0_kir.npy")
    images = torch.from_numpy(np.stack([f["image"] for f in traj]))
    acts = torch.from_numpy(np.stack([f["delta_action"] for f in traj]))
    pad = torch.tensor([0.0] * 6 + [-1.0])
    # plain: the reference frame everywhere, padding actions (gripper -1) everywhere
    assert torch.equal(plain._state["frames"][0], images[0].expand(5, -1, -1, -1))
    assert torch.equal(plain._state["actions"][0], pad.expand(5, -1))
    # KIR: reference + the key frame's 4 context frames with their actions; the observation is the newest frame
    assert torch.equal(kir._state["frames"][1], images) and torch.equal(kir._state["actions"][1, 1:], acts[1:])
    assert torch.equal(kir._state["actions"][1, 0], pad)
    assert torch.equal(kir._state["frames"][0], images[0].expand(5, -1, -1, -1))  # traj0.npy in the same env
    assert torch.equal(kir.reset(reset_state_ids=np.array([1, 1])).main_images[0], images[4])


def test_queue_and_condition_actions_roll_after_each_chunk(tiny_wan):
    env = _env(tiny_wan, True)
    env.reset(reset_state_ids=np.array([1, 3]))
    before = {k: v.clone() for k, v in env._state.items()}
    actions = torch.rand(2, 8, 7) * 2 - 1
    video = env.world_model.generate(before["frames"], torch.cat([before["actions"], actions], 1))  # 13 frames
    out = env.chunk_step(actions)
    assert torch.equal(out.obs.main_images, video[:, -1])  # same noise seed: the same frames as generate()
    assert torch.equal(env._state["frames"][:, 0], before["frames"][:, 0])  # the reference frame stays
    assert torch.equal(env._state["frames"][:, 1:], video[:, 9:13])  # slots 1-4 <- frames 9-12
    assert torch.equal(env._state["actions"][:, 0], before["actions"][:, 0])
    assert torch.equal(env._state["actions"][:, 1:], actions[:, 4:])  # <- the chunk's last 4 actions
    with pytest.raises(ValueError, match="4k frames per chunk"):
        env.world_model.predict(env._state, torch.zeros(2, 6, 7))


def test_noise_seed_is_fixed_as_upstream_or_drawn_from_the_env(tiny_wan):
    model = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=2)
    frames = torch.randint(0, 256, (1, 5, 64, 64, 3), dtype=torch.uint8)
    acts = torch.zeros(1, 9, 7)
    a = model.generate(frames, acts, torch.Generator().manual_seed(1))
    b = model.generate(frames, acts, torch.Generator().manual_seed(2))
    assert torch.equal(a, b)  # upstream: seed 0 on every call, whatever the env's generator
    model.noise_seed = None
    c = model.generate(frames, acts, torch.Generator().manual_seed(1))
    d = model.generate(frames, acts, torch.Generator().manual_seed(2))
    assert not torch.equal(c, d)


def test_training_loss_decreases_on_tiny_clips(tiny_wan):
    torch.manual_seed(0)
    model = WanWorldModel(model_path=str(tiny_wan), num_inference_steps=2)
    rng = np.random.default_rng(0)
    frames = torch.from_numpy(rng.integers(0, 256, (2, 13, 64, 64, 3), dtype=np.uint8))
    frames[:, 1:] = frames[:, :1]  # a static scene: learnable in a few steps
    actions = torch.zeros(2, 13, 7)
    opt = torch.optim.AdamW([p for p in model.dit.parameters()], lr=3e-3)
    losses = []
    for step in range(25):
        loss = model.training_loss(frames, actions, generator=torch.Generator().manual_seed(step % 5))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(np.isfinite(losses)) and np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), losses
    assert not any(p.grad is not None for p in model.vae.parameters())  # the VAE is frozen
    with pytest.raises(ValueError, match="1 \\+ 4k >= 9 frames"):
        model.training_loss(frames[:, :12], actions[:, :12])


def test_goal_release_with_the_task_conditioned_reward_model(tmp_path):
    from rlinf_core.world_models.reward_models import TaskEmbedResnetRewardModel
    from rlinf_wm_wan.make_tiny import make_tiny

    root = make_tiny(tmp_path / "RLinf-Wan-LIBERO-Goal-Tiny", reward="taskemb", num_init=2)
    assert (root / "taskemb_resnet_rm.pth").is_file() and not (root / "resnet_rm.pth").exists()
    rm = TaskEmbedResnetRewardModel(str(root / "taskemb_resnet_rm.pth"), task_suite="libero_goal")
    model = WanWorldModel(model_path=str(root), num_inference_steps=1)
    env = WorldModelEnv(model, rm, str(root / "dataset"), num_envs=2, max_episode_steps=8, enable_kir=True)
    obs = env.reset(reset_state_ids=np.array([1, 3]))
    assert obs.task_descriptions == [
        "open the middle drawer of the cabinet",
        "open the top drawer and put the bowl inside",
    ]
    out = env.chunk_step(torch.zeros(2, 8, 7))
    assert out.rewards.shape == (2, 8) and np.isfinite(out.rewards).all()
