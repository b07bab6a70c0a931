"""Run by test_openpi_ddp.py under ``torch.distributed.run`` (2 CPU ranks, gloo).

Each rank builds the tiny π0 with the given settings (JSON), wraps it in DistributedDataParallel (as Lightning's
DDP strategy does: the loss is computed inside the DDP forward), takes two optimizer steps on rank-specific data
(DDP reports parameters without gradients at the second) and writes a digest of its parameters before and after
to ``OUT/rank<k>.json``.
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
from rlinf_policy_openpi.policy import OpenPIPolicy


class Loss(nn.Module):
    def __init__(self, policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs, record):
        out = self.policy.evaluate(obs, record, compute_values=True, compute_entropy=True)
        return -out.logprobs.mean() + out.values.pow(2).mean() - 0.01 * out.entropy.mean()


def digest(module: nn.Module) -> str:
    h = hashlib.sha1()
    for name, p in sorted(module.named_parameters()):
        h.update(name.encode() + p.detach().float().numpy().tobytes())
    return h.hexdigest()


def main(model_path: str, out: str, settings: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    kw = json.loads(settings)
    if kw.get("lora"):
        kw["lora"] = LoRAConfig(**kw["lora"])
    policy = OpenPIPolicy.from_pretrained(model_path, num_steps=3, add_value_head=True, **kw)
    ddp = DistributedDataParallel(Loss(policy))
    optim = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    start = digest(policy)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(2):
        obs = Observation(
            main_images=torch.randint(0, 256, (2, 32, 32, 3), generator=gen, dtype=torch.uint8),
            task_descriptions=["press the button", "open the drawer"],
            states=torch.randn(2, 4, generator=gen),
        )
        with torch.no_grad():
            record = policy.act(obs).record
        optim.zero_grad()
        ddp(obs, record).backward()
        optim.step()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps({"start": start, "end": digest(policy)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
