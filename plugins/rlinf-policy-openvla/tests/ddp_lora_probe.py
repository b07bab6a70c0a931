"""Run by test_openvla_lora_ddp.py under ``torch.distributed.run`` (2 CPU ranks, gloo).

Each rank builds the tiny OpenVLA-OFT with LoRA on RLinf's adapter target list and a value head,
wraps it in DistributedDataParallel (as Lightning's DDP strategy does: the loss is computed inside
the DDP forward), takes two optimizer steps on rank-specific data and writes a digest of its
parameters before and after to ``OUT/rank<k>.json``.
"""

import hashlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from rlinf_core import Observation
from rlinf_core.models.lora import LoRAConfig
from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.released import RLINF_LORA_TARGETS
from rlinf_policy_openvla.settings import ActionConfig


class Loss(nn.Module):
    def __init__(self, policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs, record):
        out = self.policy.evaluate(obs, record, compute_values=True)
        return -out.logprobs.mean() + out.values.pow(2).mean()


def digest(module: nn.Module) -> str:
    h = hashlib.sha1()
    for name, p in sorted(module.named_parameters()):
        h.update(name.encode() + p.detach().float().numpy().tobytes())
    return h.hexdigest()


def main(model_path: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    policy = OpenVLAOFTPolicy(
        model_path,
        lora=LoRAConfig(target_modules=RLINF_LORA_TARGETS),
        add_value_head=True,
        actions=ActionConfig(num_action_chunks=2),
    )
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    ddp = DistributedDataParallel(Loss(policy))
    optim = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    start = digest(policy)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(2):  # DDP reports unused parameters at the second iteration
        obs = Observation(
            main_images=torch.randint(0, 256, (2, 32, 32, 3), generator=gen, dtype=torch.uint8),
            task_descriptions=["put the bowl on the plate", "turn on the stove"],
        )
        with torch.no_grad():
            record = policy.act(obs).record
        optim.zero_grad()
        ddp(obs, record).backward()
        optim.step()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{rank}.json").write_text(
        json.dumps({"start": start, "end": digest(policy), "trainable": trainable})
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
