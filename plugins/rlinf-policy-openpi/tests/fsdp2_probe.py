"""Run OpenPIModel's passes under FSDP2 (one gloo rank, every layer its own unit): outputs and gradients must equal
the unsharded model's. Prints ``OK``. Used by ``test_openpi_model.py::test_fsdp2_units`` (a subprocess: it owns
the process group)."""

import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

from rlinf_core.testing.numerics import assert_close_reordered, reorder_rtol
from rlinf_policy_openpi.checkpoint import load_model
from rlinf_policy_openpi.testing import FLOAT32_SUMS, make_inputs


def check(path: str) -> int:
    torch.manual_seed(0)
    model, _ = load_model(path)
    sharded = copy.deepcopy(model)
    names = set(sharded._no_split_modules)
    for m in reversed(list(sharded.modules())):
        if type(m).__name__ in names:
            fully_shard(m)
    fully_shard(
        sharded
    )  # the root unit, as rlinf_core.distributed.strategies shards a policy (whose act / evaluate are registered)
    for name in ("prefix_cache", "suffix_forward"):
        register_fsdp_forward_method(sharded, name)
    inputs = make_inputs(model.config)

    def run(m):
        cache = m.prefix_cache(*inputs[:5])
        v, s = m.suffix_forward(cache, None, *inputs[5:])
        vj, _, _ = m(*inputs)
        loss = v.square().mean() + s.mean() + vj.square().mean() + cache.prefix_out[cache.pad_mask].mean()
        loss.backward()
        return v.detach(), vj.detach()

    # the same maths on parameters gathered into FSDP2's flat buffers (other memory layout: a kernel may block its
    # sums otherwise): float32 reordering (FLOAT32_SUMS); the backward doubles the chain
    ref, got = run(model), run(sharded)
    for a, b in zip(ref, got):
        assert_close_reordered(b, a, *FLOAT32_SUMS)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    n, depth = FLOAT32_SUMS
    # one scale for all: the SigLIP key biases' gradient is 0 in exact arithmetic (their own size is rounding)
    atol = reorder_rtol(n, 2 * depth) * max(g.abs().max().item() for g in grads.values())
    for name, p in sharded.named_parameters():
        g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        torch.testing.assert_close(g, grads[name], atol=atol, rtol=0, msg=name)
    return len(grads)


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    counts = [check(path) for path in sys.argv[1:]]
    dist.destroy_process_group()
    print("OK", *counts)
