"""OpenPIPolicy.act latency against ``num_steps``, and what the prefix KV cache saves in an RL act.

On a tiny random π0 (real openpi layout, written locally), one ``act`` (flow-SDE rollout with the expert critic:
SigLIP + VLM once, then ``num_steps`` expert passes and one critic pass) is timed for several ``num_steps``, with
the prefix cache (the policy's path) and without it (every denoise step re-runs images, VLM and expert in one
joint pass, openpi's training forward); both give the same log-probs. Also the training recompute
(``evaluate``: one prefix + one expert pass). Prints ms per act and the ratios, measured round-robin::

    OMP_NUM_THREADS=1 python benchmarks/bench_openpi.py [--pi05] [--batch 8] [--steps 1 3 5 10]
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rlinf_core.contracts.observation import Observation
    from rlinf_policy_openpi.policy import OpenPIPolicy
    from rlinf_policy_openpi.settings import CriticConfig
    from rlinf_policy_openpi.testing import tiny_checkpoint

    path = tiny_checkpoint(pi05=args.pi05, image_size=args.image_size, layout="rlinf")
    gen = torch.Generator().manual_seed(0)
    obs = Observation(
        main_images=torch.randint(0, 256, (args.batch, 64, 64, 3), generator=gen, dtype=torch.uint8),
        task_descriptions=["press the button"] * args.batch,
        states=torch.randn(args.batch, 4, generator=gen),
    )
    critic = CriticConfig(after_vlm=args.pi05)
    policies = {n: OpenPIPolicy(str(path), num_steps=n, critic=critic).eval() for n in args.steps}

    def uncached(policy):
        """The policy with a denoiser that re-runs the whole joint forward at every step (no prefix cache)."""
        model = policy.openpi
        batch = policy.inputs(obs, 1, policy.device)

        def denoiser(cache):
            def denoise(x, t):
                v, suffix, _ = model(
                    batch.images,
                    batch.image_masks,
                    batch.tokens,
                    batch.token_masks,
                    batch.state,
                    x,
                    t.expand(x.shape[0]) if t.dim() == 0 else t,
                )
                return v.float(), suffix.float()

            return denoise

        clone = OpenPIPolicy(str(path), num_steps=policy.num_steps, critic=CriticConfig(after_vlm=args.pi05)).eval()
        clone._denoiser = denoiser
        return clone

    fns = {}
    with torch.no_grad():
        for n, policy in policies.items():
            joint = uncached(policy)
            torch.manual_seed(0)
            a = policy.act(obs)
            torch.manual_seed(0)
            b = joint.act(obs)
            assert torch.allclose(a.logprobs, b.logprobs, atol=1e-4), "cached and joint acts disagree"
            fns[f"cached/{n}"] = lambda p=policy: p.act(obs)
            fns[f"joint/{n}"] = lambda p=joint: p.act(obs)
        first = policies[args.steps[0]]
        record = first.act(obs).record
        fns["evaluate"] = lambda: first.evaluate(obs, record, compute_values=True)
        times = interleaved(fns, args.rounds)

    cfg = first.config
    params = sum(p.numel() for p in first.parameters()) / 1e6
    print(
        f"tiny {'π0.5' if cfg.pi05 else 'π0'} policy: {params:.2f} M parameters, batch {args.batch}, "
        f"{cfg.num_images} × {cfg.num_image_tokens} image + {cfg.max_token_len} text prefix tokens, "
        f"H={cfg.action_horizon}, "
        f"flow_sde + critic, {args.threads} thread(s)"
    )
    print("  num_steps   act ms (cache)   act ms (no cache)   no cache / cache   act / act(1 step)")
    base = times[f"cached/{args.steps[0]}"]
    for n in args.steps:
        c, j = times[f"cached/{n}"], times[f"joint/{n}"]
        print(f"  {n:9d}  {1000 * c:15.2f}  {1000 * j:18.2f}  {j / c:16.2f}x  {c / base:17.2f}x")
    print(f"  evaluate (training recompute, {args.steps[0]}-step chain): {1000 * times['evaluate']:.2f} ms")


if __name__ == "__main__":
    main()
