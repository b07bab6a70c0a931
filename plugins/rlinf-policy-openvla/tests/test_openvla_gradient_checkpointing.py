"""gradient_checkpointing: same gradients, activations really recomputed (Llama layers and ViT blocks)."""

import pytest
import torch

from rlinf_core.models.lora import LoRAConfig
from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels


def _count_calls(policy) -> dict:
    """Forward calls of a submodule inside the first Llama layer and inside the first block of each ViT tower."""
    vla = policy.vla
    watched = {
        "llama": vla.language_model.model.layers[0].mlp,
        "dino": vla.vision_backbone.featurizer.blocks[0].mlp,
        "siglip": vla.vision_backbone.fused_featurizer.blocks[0].mlp,
    }
    counts = dict.fromkeys(watched, 0)
    for key, module in watched.items():
        module.register_forward_pre_hook(lambda *_, key=key: counts.__setitem__(key, counts[key] + 1))
    return counts


def _grads(cls, path, obs, record, **kw):
    torch.manual_seed(0)
    policy = cls(str(path), add_value_head=True, **kw)
    policy.train()
    counts = _count_calls(policy)
    out = policy.evaluate(obs, record, compute_values=True)
    loss = out.logprobs.sum() + out.values.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return loss.detach(), grads, counts


@pytest.mark.parametrize("cls,lora", [(OpenVLAOFTPolicy, False), (OpenVLAOFTPolicy, True), (OpenVLAPolicy, False)])
def test_same_gradients_and_recomputed(cls, lora, tiny_oft, tiny_openvla, obs):
    path = tiny_oft if cls is OpenVLAOFTPolicy else tiny_openvla
    kw = {"actions": ActionConfig(num_action_chunks=2), "lora": LoRAConfig() if lora else None}
    torch.manual_seed(1)
    record = cls(str(path), **kw).act(obs, do_sample=True).record
    loss0, grads0, counts0 = _grads(cls, path, obs, record, **kw)
    loss1, grads1, counts1 = _grads(cls, path, obs, record, gradient_checkpointing=True, **kw)
    assert counts0 == {"llama": 1, "dino": 1, "siglip": 1}
    assert counts1 == {"llama": 2, "dino": 2, "siglip": 2}, "the backward did not recompute the layers"
    # checkpointing recomputes the same operations on the same shapes, and autograd runs and accumulates them in an
    # order that does not depend on the CPU: equal on any CPU
    assert torch.equal(loss0, loss1)
    assert grads0.keys() == grads1.keys() and len(grads0) > 10
    for name in grads0:
        torch.testing.assert_close(grads1[name], grads0[name], rtol=0, atol=0, msg=name)


def test_rollouts_unchanged_in_train_mode(tiny_openvla, obs):
    """Decoding with a KV cache under no_grad: checkpointing must not drop the cache (even in train mode)."""
    plain = OpenVLAPolicy(str(tiny_openvla), actions=ActionConfig(num_action_chunks=2))
    ckpt = OpenVLAPolicy(str(tiny_openvla), gradient_checkpointing=True, actions=ActionConfig(num_action_chunks=2))
    plain.train(), ckpt.train()
    a, b = plain.act(obs, do_sample=False), ckpt.act(obs, do_sample=False)
    assert torch.equal(a.record["action_tokens"], b.record["action_tokens"])
    torch.testing.assert_close(a.logprobs, b.logprobs)
