"""OpenPIModel: prefix cache + suffix passes == the joint pass, positions, embeddings, adaRMS, sampling."""

import math

import pytest
import torch
import torch.nn.functional as F

from rlinf_core.testing.numerics import assert_close_reordered
from rlinf_policy_openpi._gemma_layers import AdaRMSNorm, make_att_2d_masks, sinusoidal_time_embedding
from rlinf_policy_openpi._modeling import OpenPIModel
from rlinf_policy_openpi.checkpoint import load_model
from rlinf_policy_openpi.config import variant_from_keys
from rlinf_policy_openpi.testing import FLOAT32_SUMS, make_inputs

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


@pytest.fixture(scope="module", params=[False, True], ids=["pi0", "pi05"])
def model(request, tiny):
    m, _ = load_model(tiny(pi05=request.param))
    return m.eval()


def _valid(prefix_out, pad):
    return prefix_out[pad]


def test_prefix_cache_plus_suffix_equals_joint_forward(model):
    images, masks, tokens, token_masks, state, x_t, t = make_inputs(model.config)
    with torch.no_grad():
        cache = model.prefix_cache(images, masks, tokens, token_masks, state)
        v, s = model.suffix_forward(cache, None, x_t, t)
        v_joint, s_joint, p_joint = model(images, masks, tokens, token_masks, state, x_t, t)
    assert v.shape == (3, model.config.action_horizon, 32) and s.shape == (3, model.config.action_horizon, 64)
    # the same maths, summed in other orders (attention over the cache): float32 reordering (FLOAT32_SUMS)
    assert_close_reordered(v, v_joint, *FLOAT32_SUMS)
    assert_close_reordered(s, s_joint, *FLOAT32_SUMS)
    assert_close_reordered(_valid(cache.prefix_out, cache.pad_mask), _valid(p_joint, cache.pad_mask), *FLOAT32_SUMS)
    assert cache.valid_len.tolist() == cache.pad_mask.sum(1).tolist()


def test_cache_is_reused_and_batch_expandable(model):
    images, masks, tokens, token_masks, state, x_t, t = make_inputs(model.config)
    with torch.no_grad():
        cache = model.prefix_cache(images, masks, tokens, token_masks, state)
        first, _ = model.suffix_forward(cache, None, x_t, t)
        again, _ = model.suffix_forward(cache, None, x_t, t)  # the cache is not mutated by a suffix pass
        big = cache.repeat_interleave(2)
        x2, t2 = torch.cat([x_t, x_t.flip(0)]), torch.cat([t, t.flip(0)])
        order = torch.tensor([0, 0, 1, 1, 2, 2])
        x2 = torch.stack([x_t[0], x_t[2], x_t[1], x_t[1], x_t[2], x_t[0]])
        t2 = torch.stack([t[0], t[2], t[1], t[1], t[2], t[0]])
        v2, _ = model.suffix_forward(big, None, x2, t2)
        sub, _ = model.suffix_forward(cache.index_select(torch.tensor([2])), None, x_t[2:], t[2:])
    torch.testing.assert_close(first, again, atol=0, rtol=0)  # the same call on the same inputs: equal on any CPU
    assert big.batch_size == 6 and big.keys[0].shape[0] == 6 and order.numel() == 6
    assert_close_reordered(v2[[0, 3, 4]], first, *FLOAT32_SUMS)  # other batch sizes: other kernel blockings
    assert_close_reordered(sub, first[2:], *FLOAT32_SUMS)
    with pytest.raises(ValueError, match="repeat_interleave"):
        model.suffix_forward(cache, None, x2, t2)


def test_suffix_positions_start_at_the_valid_prefix_count(model, monkeypatch):
    images, masks, tokens, token_masks, state, x_t, t = make_inputs(model.config)
    seen = []
    rope = model._rope
    monkeypatch.setattr(model, "_rope", lambda h, pos: (seen.append(pos.clone()), rope(h, pos))[1])
    with torch.no_grad():
        cache = model.prefix_cache(images, masks, tokens, token_masks, state)
        v, _ = model.suffix_forward(cache, None, x_t, t)
    suffix_pos = seen[-1]
    assert suffix_pos[:, 0].tolist() == cache.valid_len.tolist() != [cache.pad_mask.shape[1]] * 3
    assert torch.equal(suffix_pos, cache.valid_len[:, None] + torch.arange(model.config.suffix_len))
    # the same sample with 7 more padding tokens and without the always-missing camera slot: same velocity
    pad = torch.zeros(3, 7, dtype=torch.long)
    with torch.no_grad():
        longer = model.prefix_cache(
            images[:2], masks[:2], torch.cat([tokens, pad], 1), torch.cat([token_masks, pad.bool()], 1), state
        )
        v_longer, _ = model.suffix_forward(longer, None, x_t, t)
    assert_close_reordered(v_longer, v, *FLOAT32_SUMS)


def test_language_embeddings_are_scaled_once_and_images_not(model):
    cfg = model.config
    images, masks, tokens, token_masks, *_ = make_inputs(cfg)
    table = model.paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight
    with torch.no_grad():
        embs, pad, ar = model.embed_prefix(images, masks, tokens, token_masks)
        feats = model.embed_images(images)
    n_img = cfg.num_images * cfg.num_image_tokens
    torch.testing.assert_close(embs[:, n_img:], table[tokens] * math.sqrt(cfg.vlm_width), atol=0, rtol=0)
    torch.testing.assert_close(embs[:, :n_img], torch.cat(feats, 1), atol=0, rtol=0)
    assert not ar.any() and pad[:, n_img:].equal(token_masks)
    # tied, as Gemma: the LM head is the embedding table
    assert model.paligemma_with_expert.paligemma.lm_head.weight is table


def test_adarms_norms_have_no_weight(tiny):
    pi0, _ = load_model(tiny(pi05=False))
    pi05, _ = load_model(tiny(pi05=True))
    ada = {k for k in pi05.state_dict() if "gemma_expert" in k and "norm" in k}
    assert ada and all(k.endswith(("norm.dense.weight", "norm.dense.bias")) for k in ada)
    assert "paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.dense.weight" in ada
    assert "paligemma_with_expert.gemma_expert.model.norm.dense.bias" in ada
    assert "paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.weight" in pi0.state_dict()
    assert "paligemma_with_expert.paligemma.model.language_model.layers.0.input_layernorm.weight" in pi05.state_dict()
    assert variant_from_keys(pi05.state_dict()) is True and variant_from_keys(pi0.state_dict()) is False
    assert hasattr(pi05, "time_mlp_in") and not hasattr(pi05, "state_proj")
    assert hasattr(pi0, "state_proj") and hasattr(pi0, "action_time_mlp_in") and not hasattr(pi0, "time_mlp_in")
    # x̂(1 + scale) + shift, gate from the same dense layer
    norm = AdaRMSNorm(8, 4)
    torch.nn.init.normal_(norm.dense.weight)
    x, cond = torch.randn(2, 3, 8), torch.randn(2, 4)
    y, gate = norm(x, cond)
    scale, shift, g = norm.dense(cond)[:, None].chunk(3, -1)
    xhat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert_close_reordered(y, xhat * (1 + scale) + shift, n=8, depth=3)  # mean of 8 squares, dense of 4, affine
    torch.testing.assert_close(gate, g, rtol=0, atol=0)  # the same dense layer on the same input


def test_time_conditions_the_velocity(model):
    images, masks, tokens, token_masks, state, x_t, t = make_inputs(model.config)
    with torch.no_grad():
        cache = model.prefix_cache(images, masks, tokens, token_masks, state)
        v0, _ = model.suffix_forward(cache, None, x_t, torch.full_like(t, 0.2))
        v1, _ = model.suffix_forward(cache, None, x_t, torch.full_like(t, 0.9))
    assert (v0 - v1).abs().max() > 1e-4


def test_sample_actions_is_the_euler_ode(model):
    images, masks, tokens, token_masks, state, x_t, _ = make_inputs(model.config)
    n = 3
    with torch.no_grad():
        actions = model.sample_actions(images, masks, tokens, token_masks, state, num_steps=n, noise=x_t)
        cache = model.prefix_cache(images, masks, tokens, token_masks, state)
        x = x_t.clone()
        for i in range(n):
            tau, nxt = 1 - i / n, 1 - (i + 1) / n
            v, _ = model.suffix_forward(cache, state, x, torch.full((3,), tau))
            x = x + (nxt - tau) * v
    assert_close_reordered(actions, x, *FLOAT32_SUMS)


def test_low_precision_storage_and_autocast(model):
    import copy

    inputs = make_inputs(model.config)
    with torch.no_grad():
        ref = model(*inputs)[0]
        full = copy.deepcopy(model).to(torch.bfloat16)  # bf16-true
        frozen_vlm = copy.deepcopy(model)  # train_expert_only: the frozen VLM stored in bf16, the expert in fp32
        frozen_vlm.paligemma_with_expert.paligemma.to(torch.bfloat16)
        outs = [m(*inputs)[0] for m in (full, frozen_vlm)]
        for m in (full, frozen_vlm):
            cache = m.prefix_cache(*inputs[:5])
            outs.append(m.suffix_forward(cache, None, *inputs[5:])[0])
        with torch.autocast("cpu", dtype=torch.bfloat16):  # precision: bf16 (fp32 weights, bf16 compute)
            outs.append(model(*inputs)[0])
    # bf16 keeps 8 significant bits: each tensor stored or computed in bf16 is off by up to 2^-8 of its size, and
    # the velocity passes ~12 of them in a row (embeddings, 6 layers' attention and MLP outputs, the projection),
    # so up to ~12 · 2^-8 ≈ 5e-2 of the output's size (fp32 accumulation inside the matmuls: no per-term error)
    for out in outs:
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        torch.testing.assert_close(out, ref, rtol=0, atol=12 * 2**-8 * ref.abs().max().item())


def test_gradient_checkpointing_gives_the_same_gradients(tiny):
    model, _ = load_model(tiny(pi05=True))
    inputs = make_inputs(model.config)
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        model.train().gradient_checkpointing = checkpointing
        cache = model.prefix_cache(*inputs[:5])
        v, _ = model.suffix_forward(cache, None, *inputs[5:])
        (v.square().mean() + model(*inputs)[0].mean()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 50
    # checkpointing recomputes the same operations on the same shapes, and autograd runs and accumulates them in an
    # order that does not depend on the CPU: equal on any CPU
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=0, rtol=0, msg=name)


def test_fsdp2_units(tiny):
    """Every layer an FSDP2 unit (the model's ``_no_split_modules``): same outputs and gradients as unsharded."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    probe = Path(__file__).with_name("fsdp2_probe.py")
    with socket.socket() as s:  # a free port: pytest-xdist workers run this test side by side
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_PORT": str(port)}
    out = subprocess.run(
        [sys.executable, str(probe), str(tiny(pi05=False)), str(tiny(pi05=True))],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("kv_heads, slen", [(1, 3), (2, 3), (1, 40), (4, 5)])
def test_folded_and_repeated_grouped_attention_agree(kv_heads, slen):
    from rlinf_policy_openpi._gemma_layers import additive_mask, attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, n, 16, generator=gen) for h, n in ((8, slen), (kv_heads, 50), (kv_heads, 50)))
    pad = torch.rand(2, 50, generator=gen) > 0.3
    allowed = pad[:, None, :].expand(2, slen, 50) & (torch.rand(2, slen, 50, generator=gen) > 0.2)
    mask = additive_mask(allowed, torch.float32)
    out = attention(q, k, v, mask, 0.25)  # slen < 2·16 folds the heads, 40 repeats k / v
    g = 8 // kv_heads
    ref = (
        F.scaled_dot_product_attention(
            q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=mask, scale=0.25
        )
        .transpose(1, 2)
        .reshape(2, slen, -1)
    )
    torch.testing.assert_close(out, ref)


def test_fp16_masks_stay_finite():
    from rlinf_policy_openpi._gemma_layers import additive_mask, attention

    pad = torch.tensor([[True, True, False]])
    mask = additive_mask(make_att_2d_masks(pad, torch.zeros_like(pad)), torch.float32)
    q, k = torch.randn(1, 2, 3, 4).half(), torch.randn(1, 1, 3, 4).half()
    out = attention(q, k, k, mask, 0.5)
    assert torch.isfinite(out).all()  # the pad query row attends to nothing


def test_pure_helpers():
    pad = torch.tensor([[True, True, False, True, True]])
    ar = torch.tensor([[0, 0, 0, 1, 0]])
    m = make_att_2d_masks(pad, ar)[0]
    assert m[0].tolist() == [True, True, False, False, False]  # prefix does not see the suffix block
    assert m[3].tolist() == [True, True, False, True, True]  # the suffix sees valid prefix and its block
    assert not m[2].any()
    emb = sinusoidal_time_embedding(torch.tensor([0.0, 0.5]), 8)
    assert emb.shape == (2, 8) and torch.equal(emb[0], torch.tensor([0.0] * 4 + [1.0] * 4))
    periods = 4e-3 * (4.0 / 4e-3) ** torch.linspace(0, 1, 4, dtype=torch.float64)
    torch.testing.assert_close(emb[1, :4], torch.sin(2 * math.pi * 0.5 / periods).float())


def test_bad_inputs_are_one_line(model):
    images, masks, tokens, token_masks, state, x_t, t = make_inputs(model.config)
    with pytest.raises(ValueError, match="one mask per camera"):
        model.prefix_cache(images, masks[:1], tokens, token_masks)
    with pytest.raises(ValueError, match=r"camera images must be \[B, 3, 28, 28\].*camera_slots"):
        model.prefix_cache([torch.zeros(3, 3, 32, 32)], masks[:1], tokens, token_masks)
    if not model.config.pi05:
        cache = model.prefix_cache(images, masks, tokens, token_masks)
        with pytest.raises(ValueError, match="needs the .*state"):
            model.suffix_forward(cache, None, x_t, t)
    assert isinstance(model, OpenPIModel)
