"""RFLOW sampling and the world model's chunk semantics against loops written out here."""

import math

import numpy as np
import pytest
import torch

from rlinf_wm_opensora.rflow import rflow_sample, sampling_timesteps, timestep_transform
from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


@pytest.fixture(scope="module")
def model():
    return OpenSoraWorldModel(str(tiny_world_model()), num_sampling_steps=3).eval()


def test_timestep_transform_is_the_identity_at_256_only():
    t = torch.tensor([1000.0, 900.0, 500.0, 100.0])
    torch.testing.assert_close(timestep_transform(t, 256, 256, 12), t)
    tiny = timestep_transform(t, 32, 32, 12)  # ratio sqrt(32²/512²)·2 = 1/8
    s = t / 1000
    torch.testing.assert_close(tiny, (s / 8) / (1 + (1 / 8 - 1) * s) * 1000)
    assert tiny[0] == 1000 and tiny[2] < 200


def test_rflow_sample_matches_a_direct_euler_loop():
    gen = torch.Generator().manual_seed(0)
    z0 = torch.randn(2, 4, 6, 3, 3, generator=gen)
    gen_mask = torch.tensor([[False, False, True, True, True, True]] * 2)
    weight = torch.randn(4, 4, generator=gen)

    def velocity(z, t):
        return torch.einsum("oc,bcthw->bothw", weight, z) * (t / 1000).view(-1, 1, 1, 1, 1) + 0.1

    steps = sampling_timesteps(10, 2, torch.device("cpu"), lambda t: timestep_transform(t, 32, 32, 6))
    got = rflow_sample(velocity, z0, gen_mask, steps)

    grid = [(1 - i / 10) * 1000 for i in range(10)]
    ratio = math.sqrt(32 * 32 / 512**2) * 2
    grid = [ratio * (g / 1000) / (1 + (ratio - 1) * g / 1000) * 1000 for g in grid]
    z = z0.clone()
    for i, t in enumerate(grid):
        dt = (t - grid[i + 1] if i < 9 else t) / 1000
        z = z + velocity(z, torch.full((2,), t)) * dt
        z[:, :, :2] = z0[:, :, :2]  # condition latents re-imposed
    torch.testing.assert_close(got, z)
    assert torch.equal(got[:, :, :2], z0[:, :, :2])


def test_predict_is_rflow_over_the_dit_with_q01_q99_actions(model):
    frames = torch.randint(0, 256, (2, 4, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    actions = torch.rand(2, 8, 7, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        state = model.init_state(frames, torch.zeros(2, 4, 7))
        out, queue = model.predict(state, actions, torch.Generator().manual_seed(3))

        noise = torch.randn(2, 4, 8, 4, 4, generator=torch.Generator().manual_seed(3))  # one draw per env
        q01, q99 = model.action_q01, model.action_q99
        norm = 2 * (actions - q01) / (q99 - q01) - 1
        z = torch.cat([state, noise], 2)
        mask = torch.tensor([[False] * 4 + [True] * 8] * 2)
        grid = [timestep_transform(torch.full((2,), (1 - i / 3) * 1000), 32, 32, 12) for i in range(3)]
        for i, t in enumerate(grid):
            dt = (t - grid[i + 1] if i < 2 else t) / 1000
            v = model.dit(z, t, norm, x_mask=mask, height=32, width=32)[:, :4]
            z = torch.where(mask[:, None, :, None, None], z + v * dt.view(-1, 1, 1, 1, 1), z)
        decoded = model.vae.decode(z[:, :, 4:].transpose(1, 2).flatten(0, 1) / 0.13025).sample
        want = ((decoded + 1) / 2 * 255).clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).unflatten(0, (2, 8))
    torch.testing.assert_close(queue, z[:, :, -4:])  # the queue keeps the last 4 *generated* latents
    assert torch.equal(out, want)


def test_reset_encodes_frame_zero_repeated_and_the_queue_rolls(model):
    from rlinf_core.envs.world_model_env import WorldModelEnv
    from rlinf_core.world_models.reward_models import ResnetRewardModel

    root = tiny_world_model()
    env = WorldModelEnv(
        model,
        ResnetRewardModel(checkpoint=str(root / "resnet_rm.pth")),
        str(root / "dataset"),
        num_envs=2,
        group_size=2,
        max_episode_steps=24,
        reward_coef=5.0,
    )
    obs = env.reset()
    first = np.load(sorted((root / "dataset").glob("traj*.npy"))[env.reset_state_ids[0]], allow_pickle=True)[0]
    assert torch.equal(obs.main_images[0], torch.from_numpy(first["image"]))  # the first observation is frame 0
    assert obs.task_descriptions[0] == first["instruction"]
    queue0 = env._state.clone()
    assert queue0.shape == (2, 4, 4, 4, 4)
    repeated = torch.from_numpy(first["image"])[None, None].expand(2, 4, -1, -1, -1).contiguous()
    with torch.no_grad():
        torch.testing.assert_close(queue0, model.init_state(repeated, torch.zeros(2, 4, 7)))  # frame 0, 4 times
    res = env.chunk_step(torch.zeros(2, 8, 7))
    assert res.rewards.shape == (2, 8) and res.obs.main_images.shape == (2, 32, 32, 3)
    assert not torch.equal(env._state, queue0)  # generated latents replaced the condition latents
    assert env.reset_state_ids[0] == env.reset_state_ids[1]  # a GRPO group shares its init file


def test_reward_model_scores_the_float_decoded_frames_as_upstream(model):
    """RLinf's OpenSora env feeds ``current_obs`` (the VAE's float output) to ``ResnetRM.predict_rew``, which
    clamps it to [-1, 1] (world_model_opensora_env.py:584-614, resnet_rm.py:91-94); the observation is the
    truncated uint8 frame. Not the uint8 frame mapped back to [-1, 1]."""
    from rlinf_core.envs.world_model_env import WorldModelEnv
    from rlinf_core.world_models.reward_models import ResnetRewardModel

    root = tiny_world_model()
    rm = ResnetRewardModel(checkpoint=str(root / "resnet_rm.pth"))
    env = WorldModelEnv(model, rm, str(root / "dataset"), num_envs=2, group_size=1, max_episode_steps=24)
    seen = []
    logits = rm._logits
    rm._logits = lambda x, instructions: (seen.append(x.clone()), logits(x, instructions))[1]
    env.reset(np.array([0, 1]))
    queue, gen_state = env._state.clone(), env._gen.get_state()
    actions = torch.rand(2, 8, 7, generator=torch.Generator().manual_seed(4)) * 2 - 1
    obs = env.chunk_step(actions).obs
    with torch.no_grad():  # upstream's path: the same sampled latents, decoded by diffusers' VAE, clamped
        generated, _ = model._sample(queue, actions, torch.Generator().set_state(gen_state))
        decoded = model.vae.decode(generated.transpose(1, 2).flatten(0, 1) / 0.13025).sample  # [16, 3, S, S]
    upstream_input = decoded.clamp(-1.0, 1.0)
    (got,) = seen
    torch.testing.assert_close(got, upstream_input, rtol=0, atol=2e-6)  # float32 rounding of the 0-255 scaling
    observed = ((decoded + 1) / 2 * 255).clamp(0, 255).to(torch.uint8)  # upstream's _wrap_obs: truncated
    assert torch.equal(obs.main_images, observed.unflatten(0, (2, 8))[:, -1].permute(0, 2, 3, 1))
    requantised = observed.float() / 127.5 - 1  # what the reward model saw before: ~1/255 off per pixel
    assert (requantised - upstream_input).abs().max() > 1e-3


def test_bf16_inference_path_stays_close_to_fp32():
    """The GPU path (``inference_dtype: auto`` → bf16 on CUDA), run on CPU: weights cast once, frames uint8."""
    bf16 = OpenSoraWorldModel(str(tiny_world_model()), num_sampling_steps=2, inference_dtype="bf16").eval()
    fp32 = OpenSoraWorldModel(str(tiny_world_model()), num_sampling_steps=2).eval()
    frames = torch.randint(0, 256, (2, 4, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    outs = []
    for m in (bf16, fp32):
        with torch.no_grad():
            state = m.init_state(frames, torch.zeros(2, 4, 7))
            out, queue = m.predict(state, torch.zeros(2, 8, 7), torch.Generator().manual_seed(0))
        outs.append(out)
    assert bf16.dit.t_block[1].weight.dtype == torch.bfloat16 and next(bf16.vae.parameters()).dtype == torch.bfloat16
    assert outs[0].dtype == torch.uint8 and queue.dtype == torch.float32
    assert (outs[0].float() - outs[1].float()).abs().mean() < 3.0


def test_bad_inputs_are_one_line_errors(model):
    with pytest.raises(ValueError, match=r"uint8 condition frames \[B, 4, H, W, 3\]"):
        model.init_state(torch.zeros(1, 2, 32, 32, 3, dtype=torch.uint8), torch.zeros(1, 2, 7))
    state = model.init_state(torch.zeros(1, 4, 32, 32, 3, dtype=torch.uint8), torch.zeros(1, 4, 7))
    with pytest.raises(ValueError, match="generates 8 frames per chunk, got 4 actions"):
        model.predict(state, torch.zeros(1, 4, 7))


def test_make_tiny_in_channels_sets_the_vae_latent_channels_too(tmp_path):
    """A DiT with more latent channels gets a VAE with as many (else the directory does not load)."""
    import torch

    from rlinf_wm_opensora.make_tiny import write_tiny
    from rlinf_wm_opensora.world_model import OpenSoraWorldModel

    write_tiny(tmp_path / "wm", image_size=16, num_trajectories=1, in_channels=8)
    wm = OpenSoraWorldModel(str(tmp_path / "wm"), num_sampling_steps=1)
    assert wm.vae.config.latent_channels == 8 == wm.config.in_channels
    state = wm.init_state(torch.zeros(1, 4, 16, 16, 3, dtype=torch.uint8), torch.zeros(1, 4, wm.action_dim))
    assert state.shape == (1, 8, 4, 2, 2)


def test_action_tokens_feed_the_actions_to_every_block():
    """``action_tokens`` adds the action embedding to the tokens: with the spatial modulation's action path cut
    (the action encoder's output then only reaches the tokens), the output still depends on the actions."""
    import torch

    from rlinf_wm_opensora._modeling import STDiT3, STDiT3Config

    torch.manual_seed(0)
    cfg = dict(hidden_size=32, depth=1, num_heads=2, caption_channels=8, model_max_length=4, action_dim=4)
    plain, tokens = STDiT3(STDiT3Config(**cfg)), STDiT3(STDiT3Config(**cfg, action_tokens=True))
    tokens.load_state_dict(plain.state_dict())
    for block in (*plain.temporal_blocks, *tokens.temporal_blocks):  # upstream zero-inits them: make them live
        torch.nn.init.normal_(block.attn.proj.weight, std=0.1)
    tokens.load_state_dict(plain.state_dict())
    x, t = torch.randn(1, 4, 6, 4, 4), torch.tensor([500.0])
    a1, a2 = torch.zeros(1, 2, 4), torch.ones(1, 2, 4)
    with torch.no_grad():
        assert not torch.allclose(plain(x, t, a1), tokens(x, t, a1))
        for m in (plain, tokens):  # cut the modulation path: t_block sees the timestep only
            m.t_block[1].weight.zero_()
        assert torch.equal(plain(x, t, a1), plain(x, t, a2))
        assert not torch.allclose(tokens(x, t, a1), tokens(x, t, a2))
