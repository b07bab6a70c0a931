"""Action tokenizer, un-normalisation against the OpenVLA formula, norm-stat keys, SFT loss."""

import json
import shutil

import numpy as np
import pytest
import torch

from rlinf_core.models.norm_stats import resolve_unnorm_key
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.action_tokenizer import ActionTokenizer
from rlinf_policy_openvla.settings import ActionConfig

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

STATS = {"q01": [-0.5, -2.0, 0.1, 0.0], "q99": [0.5, 3.0, 0.2, 1.0], "mask": [True, True, True, False]}


def _reference_decode(token_ids: np.ndarray, vocab: int, n_bins: int = 256) -> np.ndarray:
    """OpenVLA's ActionTokenizer.decode_token_ids_to_actions + BOUNDS_Q99 un-normalisation, in numpy."""
    bins = np.linspace(-1, 1, n_bins)
    centers = (bins[:-1] + bins[1:]) / 2.0
    idx = np.clip(vocab - token_ids - 1, a_min=0, a_max=centers.shape[0] - 1)
    normalized = centers[idx]
    low, high, mask = (np.array(STATS[k]) for k in ("q01", "q99", "mask"))
    return np.where(mask, 0.5 * (normalized + 1) * (high - low + 1e-8) + low, normalized)


def test_decode_matches_openvla_formula():
    tok = ActionTokenizer(vocab_size=1000, n_bins=256, action_stats=STATS)
    assert tok.token_begin == 744
    ids = torch.arange(744, 1000).view(64, 4)
    got = tok.unnormalize(tok.bins_to_normalized(tok.tokens_to_bins(ids)))
    # float32 against numpy's float64: ~5 roundings of 2^-24 on terms <= 2 (the statistics' range): < 1e-6
    np.testing.assert_allclose(got.numpy(), _reference_decode(ids.numpy(), 1000), atol=1e-6)


def test_encode_matches_np_digitize_and_round_trips():
    tok = ActionTokenizer(vocab_size=1000, n_bins=256, action_stats=STATS)
    a = torch.linspace(-1.2, 1.2, 401)
    ours = tok.bins_to_tokens(tok.normalized_to_bins(a)).numpy()
    ref = 1000 - np.digitize(np.clip(a.numpy(), -1, 1), np.linspace(-1, 1, 256))
    np.testing.assert_array_equal(ours, ref)
    j = torch.arange(1, 256)  # slice position 0 shares the centre of position 1 (OpenVLA's clip)
    np.testing.assert_array_equal(tok.normalized_to_bins(tok.bins_to_normalized(j)).numpy(), j.numpy())
    env = torch.tensor([[0.3, 2.5, 0.15, -0.7]])
    back = tok.unnormalize(tok.normalize(env))
    assert (back - env).abs().max() < 1e-6
    assert tok.normalize(env)[0, 3] == -0.7  # masked dimension untouched


def test_policy_actions_follow_the_formula(tmp_path, tiny_oft, obs):
    model = tmp_path / "m"
    shutil.copytree(tiny_oft, model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["norm_stats"] = {"custom_ds": {"action": {**STATS, "mask": STATS["mask"]}}}
    (model / "config.json").write_text(json.dumps(cfg))
    (model / "dataset_statistics.json").unlink()
    policy = OpenVLAOFTPolicy(model_path=str(model), actions=ActionConfig(num_action_chunks=2))
    assert policy.action_dim == 4 and policy.unnorm_key == "custom_ds"
    with torch.no_grad():
        out = policy.act(obs, do_sample=True, temperature=5.0)
    ref = _reference_decode(out.record["action_tokens"].numpy(), policy.action_tokenizer.vocab_size)
    np.testing.assert_allclose(out.actions.numpy(), ref, atol=1e-6)  # as above


def test_unnorm_key_resolution():
    stats = {"libero_spatial_no_noops": {}, "bridge_orig": {}}
    assert resolve_unnorm_key(stats, "libero_spatial", "m") == "libero_spatial_no_noops"
    assert resolve_unnorm_key(stats, "bridge_orig", "m") == "bridge_orig"
    assert resolve_unnorm_key({"only": {}}, None, "m") == "only"
    with pytest.raises(ValueError, match="available: bridge_orig, libero_spatial_no_noops"):
        resolve_unnorm_key(stats, "libero_goal", "m")
    with pytest.raises(ValueError, match="set unnorm_key to one of"):
        resolve_unnorm_key(stats, None, "m")


def test_dataset_statistics_json_is_merged(tmp_path, tiny_oft):
    model = tmp_path / "m"
    shutil.copytree(tiny_oft, model)
    extra = {"metaworld_ml45": {"action": {"q01": [-1, -1, -1, -1], "q99": [1, 1, 1, 1], "mask": [True] * 4}}}
    (model / "dataset_statistics.json").write_text(json.dumps(extra))
    policy = OpenVLAOFTPolicy(
        model_path=str(model),
        actions=ActionConfig(unnorm_key="metaworld_ml45", num_action_chunks=2),
    )
    assert policy.action_dim == 4
    assert set(policy.spec.norm_stats) == {"libero_spatial_no_noops", "metaworld_ml45"}
    # the original key still works via the _no_noops fallback
    assert (
        OpenVLAOFTPolicy(model_path=str(model), actions=ActionConfig(unnorm_key="libero_spatial")).unnorm_key
        == "libero_spatial_no_noops"
    )


def test_invert_gripper(tiny_oft, obs):
    plain = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    inverted = OpenVLAOFTPolicy(
        model_path=str(tiny_oft),
        actions=ActionConfig(num_action_chunks=2, invert_gripper=True),
    )
    with torch.no_grad():
        a = plain.act(obs, do_sample=False).actions
        b = inverted.act(obs, do_sample=False).actions
    torch.testing.assert_close(b[..., :-1], a[..., :-1])
    torch.testing.assert_close(b[..., -1], -torch.sign(2 * a[..., -1] - 1))


@pytest.mark.parametrize("cls", [OpenVLAOFTPolicy, OpenVLAPolicy])
def test_sft_loss_fits_expert_actions(tiny_oft, obs, cls):
    torch.manual_seed(0)
    policy = cls(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=1))
    q01, q99 = policy.action_tokenizer.low.float(), policy.action_tokenizer.high.float()
    expert = (q01 + (q99 - q01) * torch.rand(3, 1, 7)).float()
    expert[..., -1] = torch.tensor([-1.0, 1.0, -1.0]).view(3, 1)  # masked gripper dimension
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=3e-3)
    first = policy.sft_loss(obs, expert)
    for _ in range(100):
        opt.zero_grad()
        loss = policy.sft_loss(obs, expert)
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first.item()
    with torch.no_grad():
        greedy = policy.act(obs, do_sample=False).actions
    width = (q99 - q01) * 2 / 255 + 1e-6
    assert ((greedy - expert).abs() <= width).float().mean() > 0.8
    with pytest.raises(ValueError, match=r"expects actions \[3, 1, 7\]"):
        policy.sft_loss(obs, expert[..., :4])


def test_kv_cache_decode_raises_no_deprecation_warning(tiny_openvla, obs):
    """The autoregressive decode steps pass the KV cache through transformers' supported ``cache`` argument
    (``past_key_values`` is deprecated for removal in 5.40): no Deprecation / FutureWarning."""
    import warnings

    policy = OpenVLAPolicy(model_path=str(tiny_openvla), actions=ActionConfig(num_action_chunks=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", FutureWarning)
        out = policy.act(obs, do_sample=False)
    assert out.actions.shape == (len(obs), 2, policy.action_dim)


def test_oft_adds_its_arguments_and_hands_the_rest_to_the_shared_constructor():
    """OpenVLAPolicy is the shared constructor itself; OpenVLAOFTPolicy adds ``attention_mode`` (and 8 actions per
    chunk by default) and passes every other argument on through ``**kwargs`` (no ``locals()`` forwarding), which
    jsonargparse and SavedSettings follow: both see the whole list."""
    import inspect

    from rlinf_core.foundation.signatures import constructor_parameters

    assert "__init__" not in vars(OpenVLAPolicy)
    source = inspect.getsource(OpenVLAOFTPolicy.__init__)
    assert "locals()" not in source and "super().__init__(model_path, actions=actions, **kwargs)" in source
    shared = set(constructor_parameters(OpenVLAPolicy))
    assert set(constructor_parameters(OpenVLAOFTPolicy)) == shared | {"attention_mode"}
