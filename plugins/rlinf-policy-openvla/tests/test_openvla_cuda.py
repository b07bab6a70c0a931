"""The CUDA bf16 path (runs only where a GPU is present; CPU runs of the same checks are in
test_openvla_precision.py and test_openvla_logprobs.py).

On a GPU the shipped setting (policy ``precision: bf16`` + trainer ``bf16-mixed``) runs cuBLAS /
SDPA bf16 kernels that the CPU tests never reach: rollout log-probs must still equal the training
recompute, and a small-lr update must still move fp32 master weights as an fp32 update does.
"""

import pytest
import torch

from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
from rlinf_policy_openvla.settings import ActionConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda")


def _policy(cls, path, **kw):
    torch.manual_seed(0)
    return cls(model_path=str(path), actions=ActionConfig(num_action_chunks=2), precision="bf16", **kw).to(CUDA)


@pytest.mark.parametrize("kind", ["oft", "openvla"])
def test_cuda_bf16_rollout_logprobs_equal_the_recompute(kind, tiny_oft, tiny_openvla, obs):
    cls, path = (OpenVLAOFTPolicy, tiny_oft) if kind == "oft" else (OpenVLAPolicy, tiny_openvla)
    policy = _policy(cls, path).eval()
    obs = obs.to(CUDA)
    assert all(p.dtype == torch.float32 for p in policy.parameters() if p.requires_grad)
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):  # what bf16-mixed enters
        out = policy.act(obs, do_sample=True, temperature=1.6)
        again = policy.evaluate(obs, out.record, temperature=1.6)
    assert out.actions.device.type == "cuda" and torch.isfinite(out.logprobs).all()
    # OFT: the same parallel forward, so bit-equal; OpenVLA: KV-cache decode vs teacher forcing in bf16
    tol = 0.0 if kind == "oft" else 5e-2
    assert (again.logprobs.float() - out.logprobs.float()).abs().max().item() <= tol


def test_cuda_bf16_update_keeps_fp32_masters(tiny_oft, obs):
    obs = obs.to(CUDA)
    ref = _policy(OpenVLAOFTPolicy, tiny_oft)
    with torch.no_grad():
        record = ref.act(obs, do_sample=True).record

    def update(precision: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        policy = OpenVLAOFTPolicy(
            model_path=str(tiny_oft),
            precision=precision,
            actions=ActionConfig(num_action_chunks=2),
        ).to(CUDA)
        params = {n: p for n, p in policy.named_parameters() if p.requires_grad}
        before = {n: p.detach().float().clone() for n, p in params.items()}
        opt = torch.optim.AdamW(params.values(), lr=2e-5, eps=1e-5, weight_decay=0.0)
        with torch.autocast("cuda", torch.bfloat16, enabled=precision != "fp32"):
            loss = -policy.evaluate(obs, record).logprobs.float().mean()
        loss.backward()
        opt.step()
        return {n: p.detach().float() - before[n] for n, p in params.items()}

    fp32, mixed = update("fp32"), update("bf16")
    num = sum(float((mixed[n] - fp32[n]).pow(2).sum()) for n in fp32)
    rel = (num / sum(float(d.pow(2).sum()) for d in fp32.values())) ** 0.5
    assert rel < 0.1, rel
