"""π0 / π0.5 flow sampling with the prefix KV cache vs one joint forward per denoise step.

Both variants integrate the same Euler ODE (t: 1 → 0, ``num_steps`` steps) on the same tiny random checkpoint
(real openpi layout, written locally) and give the same actions: ``cached`` runs SigLIP + the VLM once and the
action expert ``num_steps`` times over the cached keys / values (``OpenPIModel.sample_actions``); ``joint``
re-runs images, VLM and expert together at every step (openpi's training path, no cache). Prints ms per chunk
of each for several ``num_steps``, the speed-up of the cache and the cost of one prefix pass relative to one
suffix pass, measured round-robin::

    OMP_NUM_THREADS=1 python benchmarks/openpi_prefix_cache.py [--pi05] [--batch 8] [--steps 1 3 5 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from scale_common import interleaved  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pi05", action="store_true")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 3, 5, 10], help="num_steps values")
    parser.add_argument("--image-size", type=int, default=56, help="SigLIP input size of the tiny model")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model-path", default=None, help="existing checkpoint (default: write a tiny one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rlinf_policy_openpi.checkpoint import load_model
    from rlinf_policy_openpi.testing import make_inputs, tiny_checkpoint

    path = args.model_path or tiny_checkpoint(pi05=args.pi05, image_size=args.image_size, depth=args.depth)
    model, _ = load_model(path)
    model.eval()
    cfg = model.config
    images, masks, tokens, token_masks, state, _, _ = make_inputs(cfg, batch=args.batch)
    masks[2][:] = True  # three real cameras, as on a bimanual robot
    noise = torch.randn(args.batch, cfg.action_horizon, cfg.action_dim)

    def joint(n: int):
        x = noise
        for i in range(n):
            v, _, _ = model(images, masks, tokens, token_masks, state, x, torch.full((args.batch,), 1 - i / n))
            x = x - v / n
        return x

    with torch.no_grad():
        ref = joint(max(args.steps))
        assert torch.allclose(model.sample_actions(images, masks, tokens, token_masks, state, max(args.steps), noise),
                              ref, atol=1e-4), "cached and joint sampling disagree"
        cache = model.prefix_cache(images, masks, tokens, token_masks, state)
        t = torch.full((args.batch,), 0.5)
        fns = {"prefix": lambda: model.prefix_cache(images, masks, tokens, token_masks, state),
               "suffix": lambda: model.suffix_forward(cache, None, noise, t)}
        for n in args.steps:
            fns[f"cached/{n}"] = lambda n=n: model.sample_actions(images, masks, tokens, token_masks, state, n, noise)
            fns[f"joint/{n}"] = lambda n=n: joint(n)
        times = interleaved(fns, args.rounds)

    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"tiny {'π0.5' if cfg.pi05 else 'π0'}: {params:.2f} M parameters, batch {args.batch}, prefix "
          f"{cfg.num_images}x{cfg.num_image_tokens} image + {cfg.max_token_len} text tokens, H={cfg.action_horizon}, "
          f"{args.threads} thread(s)")
    print(f"  one prefix pass (SigLIP + VLM) : {1000 * times['prefix']:8.2f} ms")
    print(f"  one suffix pass (action expert): {1000 * times['suffix']:8.2f} ms   "
          f"(prefix / suffix = {times['prefix'] / times['suffix']:.1f}x)")
    print("  num_steps   cached ms   joint ms   speed-up of the cache")
    for n in args.steps:
        c, j = times[f"cached/{n}"], times[f"joint/{n}"]
        print(f"  {n:9d}  {1000 * c:10.2f}  {1000 * j:9.2f}   {j / c:6.2f}x")


if __name__ == "__main__":
    main()
