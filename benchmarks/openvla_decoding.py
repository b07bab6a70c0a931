"""OpenVLA-OFT parallel decoding vs token-by-token decoding of the same action chunk.

Both decoders use the same tiny random checkpoint (real OpenVLA layout, written locally): the
OFT policy predicts all ``C × D`` action tokens in one forward pass; the OpenVLA policy decodes
the same ``C × D`` tokens one at a time with a KV cache. Prints the time per chunk of each and
the speed-up (the two decoders condition differently — OFT slots are zero embeddings — so only
their cost is compared)::

    OMP_NUM_THREADS=1 python benchmarks/openvla_decoding.py [--batch 8] [--chunks 8] [--action-dim 7]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from scale_common import time_median  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=8, help="C, actions per chunk")
    parser.add_argument("--action-dim", type=int, default=7, help="D, tokens per action")
    parser.add_argument("--hidden-size", type=int, default=64, help="Llama hidden size of the tiny model")
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=56)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model-path", default=None, help="existing checkpoint (default: write a tiny one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rlinf_core import Observation
    from rlinf_policy_openvla import OpenVLAOFTPolicy, OpenVLAPolicy
    from rlinf_policy_openvla.make_tiny import make_tiny
    from rlinf_policy_openvla.settings import ActionConfig

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model_path or str(
            make_tiny(
                f"{tmp}/tiny",
                action_dim=args.action_dim,
                hidden_size=args.hidden_size,
                num_layers=args.num_layers,
                image_size=args.image_size,
            )
        )
        common = dict(model_path=path, actions=ActionConfig(num_action_chunks=args.chunks))
        parallel = OpenVLAOFTPolicy(**common).eval()
        sequential = OpenVLAPolicy(**common).eval()
        gen = torch.Generator().manual_seed(0)
        obs = Observation(
            main_images=torch.randint(0, 256, (args.batch, 128, 128, 3), generator=gen, dtype=torch.uint8),
            task_descriptions=["put the black bowl on the plate"] * args.batch,
        )
        with torch.no_grad():
            t_par = time_median(lambda: parallel.act(obs, do_sample=True, temperature=1.6), args.repeats, warmup=True)
            t_seq = time_median(lambda: sequential.act(obs, do_sample=True, temperature=1.6), args.repeats, warmup=True)
    n = args.chunks * parallel.action_dim
    params = sum(p.numel() for p in parallel.parameters()) / 1e6
    print(
        f"tiny OpenVLA checkpoint: {params:.2f} M parameters, batch {args.batch}, "
        f"chunk {args.chunks} x {parallel.action_dim} = {n} tokens, {args.threads} thread(s)"
    )
    print(f"  parallel (OFT, one forward)       : {1000 * t_par:8.1f} ms per chunk")
    print(f"  token-by-token (KV cache, {n:3d} steps): {1000 * t_seq:8.1f} ms per chunk")
    print(f"  speed-up of parallel decoding     : {t_seq / t_par:8.1f}x")


if __name__ == "__main__":
    main()
