"""LoRA: only adapter + value head train, the adapter directory reloads, merge-and-export is exact."""

import json
import re

import pytest
import torch
from safetensors.torch import load_file

from rlinf_core.models.lora import LoRAConfig
from rlinf_core.testing.numerics import assert_close_reordered
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.lora import default_target_modules
from rlinf_policy_openvla.settings import ActionConfig
from rlinf_policy_openvla.testing import FLOAT32_SUMS, assert_logprobs_close

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _lora_policy(path, lora_path=None, **kw):
    lora = LoRAConfig(rank=4, path=lora_path)
    return OpenVLAOFTPolicy(
        model_path=str(path),
        add_value_head=True,
        lora=lora,
        **kw,
        actions=ActionConfig(num_action_chunks=2),
    )


def _train_step(policy, obs):
    with torch.no_grad():
        out = policy.act(obs, do_sample=True, temperature=1.5)
    ev = policy.evaluate(obs, out.record, temperature=1.5, compute_values=True)
    loss = -ev.logprobs.mean() + ev.values.pow(2).mean()
    trainable = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=0.5)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return out


def test_only_adapter_and_value_head_train(tiny_oft, obs):
    policy = _lora_policy(tiny_oft)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n or ".value_head.modules_to_save." in n for n in trainable)
    assert any("language_model" in n for n in trainable) and any("vision_backbone" in n for n in trainable)
    assert any(n.endswith("lm_head.lora_A.default.weight") for n in trainable)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    _train_step(policy, obs)
    changed = {n for n, p in policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed <= trainable
    assert any("value_head" in n for n in changed) and any("lora_B" in n for n in changed)
    assert {id(p) for p in policy.value_parameters()} == {
        id(p) for n, p in policy.named_parameters() if "value_head" in n and p.requires_grad
    }


def test_default_targets_skip_unused_layers_and_value_head(tiny_oft):
    policy = _lora_policy(tiny_oft)
    regex = default_target_modules(policy.vla)
    names = [n for n, _ in policy.vla.named_modules()]
    hit = [n for n in names if re.fullmatch(regex, n)]
    assert "vision_backbone.featurizer.blocks.0.attn.qkv" in hit and "projector.fc3" in hit
    assert not [n for n in hit if "blocks.1." in n or "attn_pool" in n or "value_head" in n or "patch_embed" in n]
    layers = policy.vla.text_config.num_hidden_layers
    assert len([n for n in hit if n.startswith("language_model.model.layers")]) == 7 * layers


def test_adapter_dir_reloads(tmp_path, tiny_oft, obs):
    policy = _lora_policy(tiny_oft)
    out = _train_step(policy, obs)
    policy.save_adapter(tmp_path / "adapter")
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files
    keys = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors")).keys()
    assert any("value_head" in k for k in keys) and any("lora_A" in k for k in keys)
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["modules_to_save"] == ["value_head"]
    again = _lora_policy(tiny_oft, lora_path=str(tmp_path / "adapter"))
    a = policy.evaluate(obs, out.record, temperature=1.5, compute_values=True)
    b = again.evaluate(obs, out.record, temperature=1.5, compute_values=True)
    # the same weights (the adapter file holds them exactly) and code, in one process: equal on any CPU
    torch.testing.assert_close(b.logprobs, a.logprobs, rtol=0, atol=0)
    torch.testing.assert_close(b.values, a.values, rtol=0, atol=0)
    assert all(".lora_" in n or "value_head" in n for n, p in again.named_parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="does not fit this model"):
        OpenVLAPolicy(model_path=str(_other_tiny()), lora=LoRAConfig(path=str(tmp_path / "adapter")))


def _other_tiny():
    from rlinf_policy_openvla.testing import tiny_checkpoint

    return tiny_checkpoint(kind="openvla", hidden_size=32)


def test_merge_and_export_matches_the_adapter(tmp_path, tiny_oft, obs):
    policy = _lora_policy(tiny_oft)
    out = _train_step(policy, obs)
    policy.save_pretrained(tmp_path / "merged")
    merged = OpenVLAOFTPolicy(model_path=str(tmp_path / "merged"))
    assert not merged.is_lora and merged.has_value_head and merged.num_action_chunks == 2
    assert not any("lora" in k or "base_layer" in k for k in merged.state_dict())
    a = policy.evaluate(obs, out.record, temperature=1.5, compute_values=True)
    b = merged.evaluate(obs, out.record, temperature=1.5, compute_values=True)
    assert_logprobs_close(b.logprobs, a.logprobs, 1.5)  # merged weights: other roundings
    assert_close_reordered(b.values, a.values, *FLOAT32_SUMS)
    # exporting left the live adapter untouched: training continues from the same weights
    c = policy.evaluate(obs, out.record, temperature=1.5)
    torch.testing.assert_close(c.logprobs, a.logprobs, rtol=0, atol=0)


def test_trainable_only_checkpoint_round_trip(tiny_oft, obs):
    """What RLCheckpoint writes for a LoRA run: adapter + value head only; the base comes back from model_path."""
    from rlinf_core.run.checkpointing import FROZEN_KEY, drop_frozen, restore_frozen

    holder = torch.nn.ModuleDict({"policy": _lora_policy(tiny_oft)})  # state-dict keys as in RLModule
    out = _train_step(holder["policy"], obs)
    full = holder.state_dict()
    ckpt = {"state_dict": dict(full)}
    drop_frozen(holder, ckpt)
    kept = set(ckpt["state_dict"])
    assert kept and all(".lora_" in k or "value_head" in k or k not in dict(holder.named_parameters()) for k in kept)
    assert any("base_layer" in k for k in ckpt[FROZEN_KEY]["keys"])
    size = lambda keys: sum(full[k].numel() for k in keys)  # noqa: E731
    assert size(kept) < 0.5 * size(full), "the frozen base is most of the model"

    fresh = torch.nn.ModuleDict({"policy": _lora_policy(tiny_oft)})  # new adapter init, base from model_path
    restore_frozen(fresh, ckpt)
    fresh.load_state_dict(ckpt["state_dict"], strict=True)
    a = holder["policy"].evaluate(obs, out.record, temperature=1.5, compute_values=True)
    b = fresh["policy"].evaluate(obs, out.record, temperature=1.5, compute_values=True)
    torch.testing.assert_close(b.logprobs, a.logprobs, rtol=0, atol=0)
    torch.testing.assert_close(b.values, a.values, rtol=0, atol=0)
