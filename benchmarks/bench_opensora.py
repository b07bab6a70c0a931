"""OpenSora world-model throughput: generated frames per second with N sub-envs batched vs 1, in one run.

    python benchmarks/bench_opensora.py                      # tiny model on CPU (CI-sized, seconds)
    python benchmarks/bench_opensora.py --model-path /path/to/RLinf-OpenSora-LIBERO-Spatial --device cuda --envs 1 8 64

Each measurement resets N sub-envs (VAE encode of the 4 condition frames) and times ``chunks`` chunk predictions
(10 RFLOW steps of the STDiT3 over 4 + 8 latent frames, then the VAE decode of 8 frames per env), after one
warm-up chunk. Prints frames/s per configuration and the ratio to N = 1: batching all sub-envs of a GPU into one
sampler call is how the env is meant to run. ``--model-path`` omitted: a tiny random model (``make_tiny``).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def measure(model, num_envs: int, chunks: int, device: torch.device) -> float:
    """Generated frames per second for ``num_envs`` sub-envs over ``chunks`` chunks."""
    S = model.image_size
    frames = torch.randint(0, 256, (num_envs, model.condition.num_frames, S, S, 3), dtype=torch.uint8, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        cond_actions = torch.zeros(num_envs, model.condition.num_frames, model.action_dim, device=device)
        state = model.init_state(frames, cond_actions)
        actions = torch.zeros(num_envs, model.chunk, model.action_dim, device=device)
        _, state = model.predict(state, actions, gen)  # warm-up (kernels, caches)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(chunks):
            _, state = model.predict(state, actions, gen)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return num_envs * model.chunk * chunks / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", default=None, help="world-model directory (default: a tiny random one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="RFLOW sampling steps (released: 10)")
    args = parser.parse_args()

    from rlinf_wm_opensora.world_model import OpenSoraWorldModel

    path = args.model_path
    tmp = None
    if path is None:
        from rlinf_wm_opensora.make_tiny import write_tiny

        tmp = tempfile.TemporaryDirectory(prefix="bench-opensora-")
        path = str(write_tiny(tmp.name))
    device = torch.device(args.device)
    model = OpenSoraWorldModel(path, num_sampling_steps=args.steps).eval().to(device)
    print(f"OpenSora world model {path} on {device}: {model.image_size}px, {args.steps} steps, chunk {model.chunk}")
    base = None
    for n in args.envs:
        fps = measure(model, n, args.chunks, device)
        base = base or fps
        print(f"  {n:4d} envs: {fps:9.1f} frames/s   x{fps / base:5.2f} vs {args.envs[0]} env(s)")
    if device.type == "cuda":
        print(f"  peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
