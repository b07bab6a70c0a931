"""OpenPIPolicy on tiny π0 / π0.5 checkpoints in the real layouts: the core contract, every noise method's
rollout == recompute, the critic's placement, what trains, save / load."""

from __future__ import annotations

import pytest
import torch

from rlinf_core.contracts.observation import Observation
from rlinf_core.testing.conformance import PolicyPluginTests
from rlinf_core.testing.numerics import assert_close_reordered, reorder_rtol
from rlinf_policy_openpi import flow
from rlinf_policy_openpi.policy import OpenPIPolicy
from rlinf_policy_openpi.settings import NoiseConfig
from rlinf_policy_openpi.testing import FLOAT32_SUMS

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

VLM = "paligemma_with_expert.paligemma."
# A recompute (evaluate) of a rollout's log-probs runs the same float32 passes as the rollout: their velocities may
# differ by reordered sums, reorder_rtol(*FLOAT32_SUMS) of their size (<= 5 here). A Gaussian log-density moves by
# |x - mean| / std² per unit of mean: with |x - mean| <= 5 std (draws within 5 standard deviations) and std >= 0.08
# (the flow_noise head's floor; flow_sde / flow_cps steps are wider), by <= 5 / 0.08; the std's own rounding adds as
# much again. The bugs these comparisons are for (another noise level, step, temperature or std) move log-probs by
# > 0.15 (a temperature of 1.2 instead of 1: log 1.2 = 0.18 per element).
LOGPROB_ATOL = 2 * reorder_rtol(*FLOAT32_SUMS) * 5 * 5 / 0.08


@pytest.fixture
def ckpt(tiny):
    """``ckpt(pi05)``: the tiny RLinf-layout checkpoint (value head included) of a variant (made once per process)."""
    return lambda pi05=False: tiny(pi05=pi05, layout="rlinf", max_token_len=24)


def _obs(B=3, seed=1, states=True):
    gen = torch.Generator().manual_seed(seed)
    return Observation(
        main_images=torch.randint(0, 256, (B, 32, 32, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=[f"press the button {i}" for i in range(B)],
        states=torch.randn(B, 4, generator=gen) if states else None,
    )


def _policy(path, **kw):
    torch.manual_seed(0)
    kw.setdefault("num_steps", 3)
    return OpenPIPolicy.from_pretrained(path, **kw).eval()  # RLinf's flat names → the config groups


class TestPi0Conformance(PolicyPluginTests):
    state_dim = 4

    @pytest.fixture(autouse=True)
    def _ckpt(self, ckpt):
        self.path = ckpt(False)

    def make_policy(self):
        return _policy(self.path, noise_method="flow_sde", add_value_head=True)


class TestPi05FlowNoiseConformance(PolicyPluginTests):
    state_dim = 4

    @pytest.fixture(autouse=True)
    def _ckpt(self, ckpt):
        self.path = ckpt(True)

    def make_policy(self):
        return _policy(self.path, noise_method="flow_noise", value_after_vlm=True)


CASES = [
    ("flow_sde", {}),
    ("flow_sde", {"ignore_last": True}),
    ("flow_cps", {}),
    ("flow_noise", {}),
    ("flow_noise", {"joint_logprob": True}),
    ("flow_sde", {"joint_logprob": True}),
    ("flow_ode", {}),
]


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
@pytest.mark.parametrize("method,extra", CASES, ids=[m + "".join(f"-{k}" for k in e) for m, e in CASES])
def test_rollout_logprobs_equal_recompute(ckpt, pi05, method, extra):
    policy = _policy(ckpt(pi05), noise_method=method, value_after_vlm=pi05, **extra)
    obs = _obs(4)
    torch.manual_seed(5)
    out = policy.act(obs, temperature=1.2)
    chains = out.record["chains"]
    assert chains.shape == (4, 4, policy.config.action_horizon, 32) and out.record["denoise_inds"].shape == (4,)
    policy.train()
    ev = policy.evaluate(obs, out.record, temperature=1.2, compute_entropy=True, compute_values=True)
    torch.testing.assert_close(ev.logprobs, out.logprobs, rtol=0, atol=LOGPROB_ATOL)
    assert_close_reordered(ev.values, out.values, *FLOAT32_SUMS)
    if method == "flow_ode":
        assert torch.count_nonzero(out.logprobs) == 0
    if extra.get("ignore_last"):
        assert int(out.record["denoise_inds"][0]) <= 1


def test_actions_are_the_chains_end_unnormalised(ckpt):
    from rlinf_policy_openpi.transforms import unnormalize

    policy = _policy(ckpt(False), num_action_chunks=3, action_dim=2)
    out = policy.act(_obs(), do_sample=False)
    end = out.record["chains"][:, -1, :3, :2]
    torch.testing.assert_close(out.actions, unnormalize(end, policy.inputs.stats["actions"], quantile=False))
    assert out.actions.shape == (3, 3, 2) and out.logprobs.shape == (3, 3, 2)


def test_greedy_is_the_model_sampler_from_a_fixed_noise(ckpt):
    """do_sample=False is the plain Euler ODE of OpenPIModel.sample_actions (from the fixed greedy noise)."""
    policy = _policy(ckpt(False))
    obs = _obs()
    out = policy.act(obs, do_sample=False)
    batch = policy.inputs(obs, 1, policy.device)
    noise = policy._initial_noise(3, do_sample=False)
    ref = policy.openpi.sample_actions(
        batch.images, batch.image_masks, batch.tokens, batch.token_masks, batch.state, num_steps=3, noise=noise
    )
    assert_close_reordered(out.record["chains"][:, -1], ref, *FLOAT32_SUMS)


def test_expert_critic_reads_the_action_expert(ckpt):
    policy = _policy(ckpt(False), add_value_head=True)
    model = policy.openpi
    assert model.value_head.mlp[0].in_features == policy.config.expert_width
    obs, moved = _obs(), _obs()
    moved.states = moved.states + 1.0  # π0's state token enters the expert only
    value = policy.value(obs)
    assert (value - policy.value(moved)).abs().max() > reorder_rtol(*FLOAT32_SUMS) * value.abs().max()
    # the critic's gradient reaches the expert unless detach_critic_input
    for detach, reaches in ((False, True), (True, False)):
        policy = _policy(ckpt(False), add_value_head=True, detach_critic_input=detach).train()
        policy.evaluate(obs, policy.act(obs).record, compute_values=True).values.sum().backward()
        expert = [p.grad for n, p in policy.openpi.named_parameters() if "gemma_expert" in n]
        assert any(g is not None and g.abs().sum() > 0 for g in expert) == reaches
        assert policy.openpi.value_head.mlp[0].weight.grad.abs().sum() > 0


def test_vlm_critic_reads_the_prefix_output(ckpt):
    policy = _policy(ckpt(True), value_after_vlm=True, value_vlm_mode="mean_token")
    assert policy.openpi.value_head.mlp[0].in_features == policy.config.vlm_width
    obs = _obs()
    cache = policy._prefix(obs)
    T, L = policy.config.num_image_tokens, policy.config.max_token_len
    P = T * 3 + L  # the critic reads the prefix output: openpi's three camera slots (two masked) + all language
    assert cache.prefix_out.shape[1] == P
    fed = torch.cat([cache.prefix_out[:, :T], cache.prefix_out[:, 3 * T :]], dim=1)  # the masked slots left out
    expected = policy.openpi.value_head(fed.float().mean(1))
    assert_close_reordered(policy.value(obs), expected, *FLOAT32_SUMS)
    for mode, pos in (("first_token", 0), ("last_token", P - 1)):
        policy.value_vlm_mode = mode
        expected = policy.openpi.value_head(cache.prefix_out[:, pos].float())
        assert_close_reordered(policy.value(obs), expected, *FLOAT32_SUMS)


def test_vlm_critic_input_equals_rlinf_three_slot_reference(ckpt):
    """openpi / RLinf always feed three camera slots, a missing camera black and masked (RLinf v0.3
    ``policies/metaworld_policy.py`` ``MetaworldInputs``); padded language positions attend uniformly over every key,
    masked cameras included, and RLinf's ``get_value_from_vlm`` (``openpi_action_model.py``) averages the first
    ``num_images_in_input`` slots' tokens and all ``max_token_len`` language positions. The critic must read exactly
    that; the actions (valid tokens only) must not move."""
    from rlinf_policy_openpi.transforms import to_model_image

    policy = _policy(ckpt(True), value_after_vlm=True, value_vlm_mode="mean_token", discrete_state_input=False)
    model, cfg = policy.openpi, policy.config
    obs = _obs()  # prompts shorter than max_token_len: padded language positions
    B, T, L, S = len(obs), cfg.num_image_tokens, cfg.max_token_len, cfg.vision.image_size
    base = to_model_image(obs.main_images, S, policy.image_resize)
    black = torch.full_like(base, -1.0)  # np.zeros_like(base_image) → [-1, 1]
    on, off = torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool)
    batch = policy.inputs(obs, 1, policy.device)  # prompt tokens and state only
    tokens, token_masks, state = batch.tokens, batch.token_masks, batch.state
    assert not token_masks.all()
    with torch.no_grad():
        ref_cache = model.prefix_cache([base, black, black], [on, off, off], tokens, token_masks, state)
        one_slot = model.prefix_cache([base], [on], tokens, token_masks, state).prefix_out.float().mean(1)
    rlinf_mask = [True] * T * 1 + [False] * T * 2 + [True] * L  # get_value_from_vlm, mean_token
    reference = {
        "mean_token": ref_cache.prefix_out[:, rlinf_mask].float().mean(1),
        "first_token": ref_cache.prefix_out[:, 0].float(),
        "last_token": ref_cache.prefix_out[:, -1].float(),
    }
    apart = (one_slot - reference["mean_token"]).abs().max()  # the slots matter to padded positions
    assert apart > reorder_rtol(*FLOAT32_SUMS) * one_slot.abs().max()
    seen = []
    hook = model.value_head.register_forward_pre_hook(lambda mod, args: seen.append(args[0].float()))
    for mode, ref in reference.items():
        policy.value_vlm_mode = mode
        policy.value(obs)
        assert_close_reordered(seen[-1], ref, *FLOAT32_SUMS)
    hook.remove()
    with torch.no_grad():  # valid tokens never attend to masked slots: the same actions as one fed slot
        ref_actions = model.sample_actions(
            [base], [on], tokens, token_masks, state, num_steps=3, noise=policy._initial_noise(B, do_sample=False)
        )
    assert_close_reordered(policy.act(obs, do_sample=False).record["chains"][:, -1], ref_actions, *FLOAT32_SUMS)
    # nothing reads the prefix output (expert critic): only the fed slot, the same actions and expert values
    expert = _policy(ckpt(True), add_value_head=True, discrete_state_input=False)
    assert expert.num_prefix_slots == 1 and policy.num_prefix_slots == 3
    with torch.no_grad():
        ref_cache = model.prefix_cache([base, black, black], [on, off, off], tokens, token_masks, state)
        x = torch.zeros(B, cfg.action_horizon, cfg.action_dim)
        _, suffix = expert.openpi.suffix_forward(ref_cache, None, x, torch.ones(B))
    assert_close_reordered(expert.value(obs), expert.openpi.value_head(suffix.float().mean(1)).float(), *FLOAT32_SUMS)
    assert_close_reordered(expert.act(obs, do_sample=False).record["chains"][:, -1], ref_actions, *FLOAT32_SUMS)


def test_image_resize_follows_the_checkpoint_kind(ckpt, tiny, tmp_path):
    """openpi / RLinf checkpoints see frames resized as openpi's ``openpi_client.image_tools.resize_with_pad``
    (PIL), lerobot ones as lerobot's float ``F.interpolate``; the choice is a setting that save_pretrained keeps."""
    from openpi_client import image_tools

    policy = _policy(ckpt(False))
    assert policy.image_resize == "pil"
    gen = torch.Generator().manual_seed(3)
    obs = Observation(
        main_images=torch.randint(0, 256, (2, 48, 40, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["push the block"] * 2,
        states=torch.zeros(2, 4),
    )
    S = policy.config.vision.image_size
    openpi = torch.from_numpy(image_tools.resize_with_pad(obs.main_images.numpy(), S, S))
    assert torch.equal(
        policy.inputs(obs, 1, policy.device).images[0], openpi.permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0
    )
    lerobot = _policy(tiny(pi05=False, layout="lerobot", max_token_len=24))
    assert lerobot.image_resize == "lerobot"
    assert not torch.equal(lerobot.inputs(obs, 1, lerobot.device).images[0], policy.inputs(obs, 1, "cpu").images[0])
    lerobot.save_pretrained(tmp_path / "saved")  # an rlinf-style directory now: the setting must survive
    assert OpenPIPolicy.from_pretrained(tmp_path / "saved").image_resize == "lerobot"


def test_value_head_weights_load_from_the_checkpoint(ckpt):
    from rlinf_policy_openpi.checkpoint import read_checkpoint

    heads = read_checkpoint(ckpt(False)).heads["value_head"]
    policy = _policy(ckpt(False))  # add_value_head defaults to what the checkpoint has
    assert policy.has_value_head
    for k, v in heads.items():
        torch.testing.assert_close(policy.openpi.value_head.state_dict()[k], v)
    with pytest.raises(ValueError, match=r"value_head\.mlp\.0\.(weight|bias) has shape"):
        _policy(ckpt(False), value_hidden_sizes=(8, 4, 2))  # not the saved head's widths


def test_train_expert_only_freezes_paligemma(ckpt):
    policy = _policy(ckpt(False), train_expert_only=True).train()
    named = dict(policy.openpi.named_parameters())
    assert not any(p.requires_grad for n, p in named.items() if n.startswith(VLM))
    assert all(p.requires_grad for n, p in named.items() if not n.startswith(VLM))
    assert not policy.openpi.paligemma_with_expert.paligemma.training
    assert policy.openpi.paligemma_with_expert.gemma_expert.training
    obs = _obs()
    policy.evaluate(obs, policy.act(obs).record).logprobs.sum().backward()
    assert all(p.grad is None for n, p in named.items() if n.startswith(VLM))
    assert named["action_in_proj.weight"].grad.abs().sum() > 0
    for critic_after_vlm in (False, True):  # full fine-tune: every parameter a gradient reaches trains (DDP-safe)
        full = _policy(ckpt(False), train_expert_only=False, value_after_vlm=critic_after_vlm).train()
        out = full.evaluate(obs, full.act(obs).record, compute_values=True)
        (out.logprobs.sum() + out.values.sum()).backward()
        trains = {n for n, p in full.openpi.named_parameters() if p.requires_grad}
        assert trains == {n for n, p in full.openpi.named_parameters() if p.grad is not None}
        assert any(n.startswith(VLM) for n in trains)


def test_noise_anneal_follows_rl_steps_and_the_record(ckpt):
    policy = _policy(ckpt(False), noise_anneal=True, noise_params=(0.7, 0.3, 10))
    obs = _obs()
    levels = []
    for step in (0, 5, 10, 50):
        policy.set_rl_step(step)
        levels.append(float(policy.act(obs).record["noise_level"][0]))
    assert levels == pytest.approx([0.7, 0.5, 0.3, 0.3])
    policy.set_rl_step(0)
    out = policy.act(obs)
    policy.set_rl_step(7)  # the recompute uses the rollout's level, whatever the step now
    torch.testing.assert_close(policy.evaluate(obs, out.record).logprobs, out.logprobs, rtol=0, atol=LOGPROB_ATOL)


def test_save_load_round_trip_with_heads(ckpt, tmp_path):
    policy = _policy(ckpt(False), noise_method="flow_noise", num_action_chunks=2, action_dim=3)
    with torch.no_grad():
        policy.openpi.noise_head.mlp_logvar.moduleList[0].linear_1.bias.add_(0.3)
    policy.save_pretrained(tmp_path / "out")
    loaded = OpenPIPolicy.from_pretrained(tmp_path / "out", noise=NoiseConfig(method="flow_noise"), num_steps=3).eval()
    assert (loaded.num_action_chunks, loaded.action_dim) == (2, 3)
    obs = _obs()
    torch.manual_seed(1)
    a = policy.act(obs)
    torch.manual_seed(1)
    b = loaded.act(obs)
    torch.testing.assert_close(a.actions, b.actions)
    torch.testing.assert_close(a.logprobs, b.logprobs)
    torch.testing.assert_close(a.values, b.values)


def test_bad_settings_are_one_line_errors(ckpt):
    path = ckpt(False)
    for kw, match in (
        ({"num_action_chunks": 9}, "num_action_chunks must be 1..5"),
        ({"action_dim": 33}, "action_dim must be 1..32"),
        ({"noise_method": "flow_xyz"}, "noise_method 'flow_xyz' not supported"),
        ({"value_vlm_mode": "max_token"}, "value_vlm_mode"),
        ({"num_images_in_input": 4}, "num_images_in_input must be 1..3"),
        ({"ignore_last": True, "num_steps": 1}, "ignore_last needs num_steps >= 2"),
        ({"precision": "fp8"}, "precision 'fp8' not supported"),
        ({"image_resize": "jax"}, "image_resize 'jax' not supported; use pil or lerobot"),
    ):
        with pytest.raises(ValueError, match=match) as exc:
            OpenPIPolicy.from_pretrained(path, **kw)
        assert "\n" not in str(exc.value)
    policy = _policy(path, num_images_in_input=2)
    with pytest.raises(ValueError, match="needs wrist_images"):
        policy.act(_obs())
    with pytest.raises(ValueError, match="temperature must be > 0"):
        _policy(path).act(_obs(), temperature=0.0)


def test_greedy_record_is_marked_greedy(ckpt):
    out = _policy(ckpt(False)).act(_obs(), do_sample=False)
    assert (out.record["denoise_inds"] == flow.GREEDY).all()


def test_lora_on_paligemma_with_the_expert_training_in_full(ckpt, tmp_path):
    from rlinf_core.models.lora import LoRAConfig

    policy = _policy(ckpt(False), lora=LoRAConfig(rank=4))
    named = dict(policy.openpi.named_parameters())
    lora = [n for n in named if ".lora_" in n]
    assert lora and all(n.startswith(VLM) for n in lora)
    assert any(".language_model.layers.0.self_attn.q_proj" in n for n in lora)
    assert any(".vision_tower." in n for n in lora) and any("multi_modal_projector" in n for n in lora)
    trainable = {n for n, p in named.items() if p.requires_grad}
    assert not [n for n in trainable if n.startswith(VLM) and ".lora_" not in n], "PaliGemma base weights train"
    assert any(n.startswith("paligemma_with_expert.gemma_expert.") for n in trainable)
    assert "value_head.mlp.0.weight" in trainable
    obs = _obs()
    out = policy.evaluate(obs, policy.act(obs).record, compute_values=True)
    (out.logprobs.sum() + out.values.sum()).backward()
    assert all(named[n].grad is not None for n in lora if "lora_B" in n)
    with torch.no_grad():  # a non-zero adapter: the merged export must carry it
        for n in lora:
            if "lora_B" in n:
                named[n].add_(0.05)
    before = policy.act(obs, do_sample=False)
    policy.save_pretrained(tmp_path / "merged")
    after = OpenPIPolicy.from_pretrained(tmp_path / "merged").eval().act(obs, do_sample=False)
    assert_close_reordered(after.actions, before.actions, *FLOAT32_SUMS)  # merged weights: other roundings


def test_bf16_precision_keeps_fp32_trainable_weights_and_recomputes_the_rollout(ckpt):
    policy = _policy(ckpt(False), precision="bf16")
    named = dict(policy.openpi.named_parameters())
    assert {p.dtype for n, p in named.items() if p.requires_grad} == {torch.float32}
    assert {p.dtype for n, p in named.items() if n.startswith(VLM)} == {torch.bfloat16}  # the frozen VLM
    assert policy.compute_dtype == torch.bfloat16
    obs = _obs()
    torch.manual_seed(0)
    out = policy.act(obs)
    assert out.actions.dtype == torch.float32 and out.record["chains"].dtype == torch.float32
    ev = policy.train().evaluate(obs, out.record, compute_values=True)
    # the same bf16 passes on the same shapes, in one process: equal (one bf16 ulp of the velocity, 2^-8 of it,
    # would move a log-prob by up to ~1, so no rounding bound is tight enough to test the recompute with)
    torch.testing.assert_close(ev.logprobs, out.logprobs, rtol=0, atol=0)


def test_gradient_checkpointing_gives_the_same_gradients(ckpt):
    obs = _obs()
    grads = []
    for flag in (False, True):
        policy = _policy(ckpt(False), train_expert_only=False, gradient_checkpointing=flag)
        torch.manual_seed(0)
        record = policy.act(obs).record
        policy.train().evaluate(obs, record).logprobs.sum().backward()
        grads.append(policy.openpi.action_in_proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)  # the same operations recomputed: equal anywhere
