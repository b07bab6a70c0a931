"""Write ``openvla_oft_side/``: official OpenVLA-OFT side files for the LM width of ``openvla_hf/`` (16), saved as
moojink/openvla-oft's ``vla-scripts/finetune.py`` saves them (see README.md beside this file):
``init_module`` builds ``ProprioProjector`` / ``L1RegressionActionHead`` (the latter cast to bfloat16) with the
LIBERO constants of ``prismatic/vla/constants.py``, wraps each in DistributedDataParallel, and
``save_training_checkpoint`` writes ``torch.save(module.state_dict(), "<name>--<step>_checkpoint.pt")``.

    .venv/bin/python tests/upstream_corpus/make_openvla_oft.py <openvla-oft checkout>

On CPU, DDP takes ``device_ids=None`` (finetune.py passes its GPU id) over a one-process gloo group.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "openvla_oft_side"
LLM_DIM, STEP = 16, 100


def main(checkout: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(checkout))
    from prismatic.models.action_heads import L1RegressionActionHead
    from prismatic.models.projectors import ProprioProjector
    from prismatic.vla.constants import ACTION_DIM, PROPRIO_DIM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    proprio = DDP(ProprioProjector(llm_dim=LLM_DIM, proprio_dim=PROPRIO_DIM))
    head = DDP(L1RegressionActionHead(input_dim=LLM_DIM, hidden_dim=LLM_DIM, action_dim=ACTION_DIM).to(torch.bfloat16))
    torch.save(proprio.state_dict(), OUT / f"proprio_projector--{STEP}_checkpoint.pt")
    torch.save(head.state_dict(), OUT / f"action_head--{STEP}_checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
