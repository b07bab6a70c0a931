"""Rollout log-probs equal the training recompute; bin masking, temperature, value head position."""

import math

import pytest
import torch

from rlinf_core.testing.numerics import assert_close_reordered, reorder_rtol
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig, InputConfig
from rlinf_policy_openvla.testing import FLOAT32_SUMS, assert_logprobs_close

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _act(policy, obs, **kw):
    policy.eval()
    with torch.no_grad():
        return policy.act(obs, **kw)


@pytest.mark.parametrize("mode", ["causal", "bidirectional", "action_block"])
def test_oft_recompute_equals_rollout(tiny_oft, obs, mode):
    policy = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        attention_mode=mode,
        add_value_head=True,
        actions=ActionConfig(num_action_chunks=4),
    )
    out = _act(policy, obs, do_sample=True, temperature=1.6)
    ev = policy.evaluate(obs, out.record, temperature=1.6, compute_entropy=True, compute_values=True)
    assert_logprobs_close(ev.logprobs, out.logprobs, 1.6)
    assert_close_reordered(ev.values, out.values, *FLOAT32_SUMS)
    assert ev.logprobs.shape == (3, 4, 7) and ev.entropy.shape == (3, 4, 7)
    # entropy <= log 256, up to the rounding of a sum of 256 terms of size <= log 256: 256 · 2^-24 · 5.6 < 1e-4
    assert (ev.entropy >= 0).all() and (ev.entropy <= math.log(256) + 1e-4).all()


@pytest.mark.parametrize("chunks", [1, 2])
def test_openvla_kv_cache_decode_equals_teacher_forcing(tiny_openvla, obs, chunks):
    policy = OpenVLAPolicy(
        model_path=str(tiny_openvla),
        add_value_head=True,
        actions=ActionConfig(num_action_chunks=chunks),
    )
    out = _act(policy, obs, do_sample=True, temperature=1.3)
    assert out.actions.shape == (3, chunks, 7)
    ev = policy.evaluate(obs, out.record, temperature=1.3, compute_values=True)
    assert_logprobs_close(ev.logprobs, out.logprobs, 1.3)
    assert_close_reordered(ev.values, out.values, *FLOAT32_SUMS)


def test_recompute_with_fixed_prompt_length_and_microbatches(tiny_oft, obs):
    """Micro-batches of the rollout batch give the same log-probs as the whole batch."""
    policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    out = _act(policy, obs, do_sample=True, temperature=1.0)
    parts = [
        policy.evaluate(obs.index([i]), {"action_tokens": out.record["action_tokens"][i : i + 1]}).logprobs
        for i in range(3)
    ]
    assert_logprobs_close(torch.cat(parts), out.logprobs)


def test_sampled_tokens_stay_in_action_bins(tiny_oft, obs):
    policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    tok = policy.action_tokenizer
    out = _act(policy, obs, do_sample=True, temperature=50.0)  # nearly uniform: reaches the whole range
    tokens = out.record["action_tokens"]
    assert tokens.min() >= tok.token_begin and tokens.max() < tok.vocab_size
    assert tok.vocab_size == policy.spec.action_vocab_size == len(policy.tokenizer) - 1  # <PAD> after the bins
    assert out.actions.abs().max() <= 1.0 + 1e-6


def test_logprobs_are_temperature_scaled(tiny_oft, obs):
    policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    out = _act(policy, obs, do_sample=True, temperature=2.0)
    hot = policy.evaluate(obs, out.record, temperature=2.0).logprobs
    cold = policy.evaluate(obs, out.record, temperature=1.0).logprobs
    assert_logprobs_close(hot, out.logprobs, 2.0)
    assert (hot - cold).abs().max() > reorder_rtol(*FLOAT32_SUMS, gain=2) * cold.abs().max()


def test_greedy_picks_the_most_likely_bin(tiny_oft, obs):
    policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    out = _act(policy, obs, do_sample=False)
    ev = policy.evaluate(obs, out.record, temperature=1.0, compute_entropy=True)
    assert_logprobs_close(ev.logprobs, out.logprobs)
    logits, _ = policy._teacher_logits(obs, torch.zeros(3, 14, dtype=torch.long))
    best = torch.log_softmax(logits, -1).max(-1).values.view(3, 2, 7)
    assert_logprobs_close(out.logprobs, best)


def test_attention_modes_differ(tiny_oft, obs):
    record = None
    logps = {}
    for mode in ("causal", "bidirectional", "action_block"):
        policy = OpenVLAOFTPolicy(
            model_path=str(tiny_oft),
            attention_mode=mode,
            actions=ActionConfig(num_action_chunks=2),
        )
        record = record or _act(policy, obs, do_sample=True).record
        logps[mode] = policy.evaluate(obs, record).logprobs
    rounding = reorder_rtol(*FLOAT32_SUMS, gain=2) * logps["causal"].abs().max()
    assert (logps["causal"] - logps["bidirectional"]).abs().max() > rounding
    assert (logps["causal"] - logps["action_block"]).abs().max() > rounding
    # the first token is predicted by the last prompt token, which sees only the prompt unless bidirectional
    assert_logprobs_close(logps["causal"][:, 0, 0], logps["action_block"][:, 0, 0])


@pytest.mark.parametrize("cls", [OpenVLAOFTPolicy, OpenVLAPolicy])
def test_value_head_reads_the_last_prompt_token(tiny_oft, obs, cls):
    policy = cls(
        model_path=str(tiny_oft),
        add_value_head=True,
        value_type="action_level",
        actions=ActionConfig(num_action_chunks=2),
    )
    a = _act(policy, obs, do_sample=True, temperature=3.0).record
    b = {"action_tokens": torch.flip(a["action_tokens"], dims=[1, 2])}
    va = policy.evaluate(obs, a, compute_values=True).values
    vb = policy.evaluate(obs, b, compute_values=True).values
    assert va.shape == (3, 2)
    assert_close_reordered(va, vb, *FLOAT32_SUMS)  # independent of the actions taken
    assert not torch.allclose(va[0], va[1])  # but depends on the observation
    assert any("value_head" in n for n, _ in policy.named_parameters())
    assert set(map(id, policy.value_parameters())) == {id(p) for n, p in policy.named_parameters() if "value_head" in n}


def test_proprio_changes_the_actions(obs):
    from rlinf_policy_openvla.testing import tiny_checkpoint

    policy = OpenVLAOFTPolicy(
        model_path=str(tiny_checkpoint(kind="oft", proprio_dim=8)),
        actions=ActionConfig(num_action_chunks=2),
        inputs=InputConfig(use_proprio=True),
    )
    base = _act(policy, obs, do_sample=False)
    moved = obs.index(slice(None))
    moved.states = obs.states + 1.5
    other = _act(policy, moved, do_sample=False)
    assert (base.logprobs - other.logprobs).abs().max() > reorder_rtol(
        *FLOAT32_SUMS, gain=2
    ) * base.logprobs.abs().max()
    ev = policy.evaluate(obs, base.record)
    assert_logprobs_close(ev.logprobs, base.logprobs)


def test_two_images_use_the_wrist_view(tiny_oft, obs):
    policy = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        actions=ActionConfig(num_action_chunks=2),
        inputs=InputConfig(num_images_in_input=2),
    )
    with_wrist = obs.index(slice(None))
    with_wrist.wrist_images = torch.flip(obs.main_images, dims=[1])
    out = _act(policy, with_wrist, do_sample=True)
    assert_logprobs_close(policy.evaluate(with_wrist, out.record).logprobs, out.logprobs)
    other = with_wrist.index(slice(None))
    other.wrist_images = obs.main_images
    apart = (policy.evaluate(other, out.record).logprobs - out.logprobs).abs().max()
    assert apart > reorder_rtol(*FLOAT32_SUMS, gain=2) * out.logprobs.abs().max()
    with pytest.raises(ValueError, match="wrist_images"):
        _act(policy, obs, do_sample=True)


@pytest.mark.parametrize("cls_fixture", ["tiny_oft", "tiny_openvla"])
def test_top_k_sampling_and_recompute(request, obs, cls_fixture):
    """top_k: samples only among the k likeliest bins; rollout log-probs equal the recompute under the
    same top-k distribution (RLinf's TopKLogitsWarper in both places); entropy stays finite."""
    path = str(request.getfixturevalue(cls_fixture))
    cls = OpenVLAOFTPolicy if cls_fixture == "tiny_oft" else OpenVLAPolicy
    policy = cls(model_path=path, top_k=3, actions=ActionConfig(num_action_chunks=2))
    out = _act(policy, obs, do_sample=True, temperature=50.0)  # nearly uniform over the kept bins
    ev = policy.evaluate(obs, out.record, temperature=50.0, compute_entropy=True)
    assert_logprobs_close(ev.logprobs, out.logprobs, 50.0)
    assert torch.isfinite(ev.entropy).all() and (ev.entropy <= math.log(3) + 1e-4).all()
    assert (out.logprobs >= math.log(1 / 3) - 0.05).all()  # ~uniform over 3 bins, never over all 256
    full = cls(model_path=path, actions=ActionConfig(num_action_chunks=2))
    assert (full.evaluate(obs, out.record, temperature=50.0).logprobs < math.log(1 / 3) - 1).all()
