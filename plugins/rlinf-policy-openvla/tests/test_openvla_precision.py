"""precision: bf16 keeps fp32 master weights: a small-lr AdamW update matches the fp32 update."""

import pytest
import torch

from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.settings import ActionConfig


def _update(model_path, precision: str, obs, record, lr: float = 2e-5) -> dict[str, torch.Tensor]:
    """One AdamW step on a teacher-forced log-prob loss, under the trainer's bf16-mixed autocast
    when the policy is not fp32; returns the change of every trainable weight (float32)."""
    torch.manual_seed(0)
    policy = OpenVLAOFTPolicy(
        model_path=str(model_path),
        precision=precision,
        actions=ActionConfig(num_action_chunks=2),
    )
    params = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    before = {n: p.detach().float().clone() for n, p in params.items()}
    opt = torch.optim.AdamW(params.values(), lr=lr, eps=1e-5, weight_decay=0.0)
    ctx = torch.autocast("cpu", torch.bfloat16) if precision != "fp32" else torch.autocast("cpu", enabled=False)
    with ctx:  # what Lightning's precision: bf16-mixed enters around training_step
        loss = -policy.evaluate(obs, record).logprobs.mean()
    loss.backward()
    opt.step()
    for p in params.values():
        assert opt.state[p]["exp_avg"].dtype == p.dtype
    return {n: p.detach().float() - before[n] for n, p in params.items()}


def _rel(delta: dict, ref: dict) -> float:
    num = sum(float((delta[n] - ref[n]).pow(2).sum()) for n in ref)
    return (num / sum(float(r.pow(2).sum()) for r in ref.values())) ** 0.5


@pytest.mark.filterwarnings("ignore:precision. bf16-true")
def test_bf16_update_matches_fp32_update(tiny_oft, obs):
    ref_policy = OpenVLAOFTPolicy(model_path=str(tiny_oft), actions=ActionConfig(num_action_chunks=2))
    with torch.no_grad():
        record = ref_policy.act(obs, do_sample=True).record
    fp32 = _update(tiny_oft, "fp32", obs, record)
    mixed = _update(tiny_oft, "bf16", obs, record)  # the shipped GPU setting
    pure = _update(tiny_oft, "bf16-true", obs, record)  # what precision: bf16 did before
    assert set(mixed) == set(fp32)
    rel_mixed, rel_pure = _rel(mixed, fp32), _rel(pure, fp32)
    # bf16 compute only perturbs the gradient (Adam's first step is ~lr * sign(grad)); bf16 storage
    # rounds most 2e-5 steps away (or up to a bf16 spacing)
    assert rel_mixed < 0.1, rel_mixed
    assert rel_pure > 0.3, rel_pure
    unchanged = sum(int((d == 0).sum()) for d in pure.values()) / sum(d.numel() for d in pure.values())
    assert unchanged > 0.2, unchanged
