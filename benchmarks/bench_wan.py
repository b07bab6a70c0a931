"""Wan world-model throughput: predicted frames/s of ``WanWorldModel.predict`` for N batched envs vs 1 env
(the ratio column: frames/s over that of the first batch size).

One chunk = encode the 5 queued frames, ``num_inference_steps`` DiT passes over 1 + (5 + C - 1) / 4 latent frames,
decode 5 + C frames; C = 8 frames are returned per env. Each batch size runs ``--repeats`` chunks after a warm-up;
the time of the three stages is reported too (the DiT's share grows with the model, the VAE's with the frame size).
By default a tiny random release is written (``make_tiny``, CPU); pass a real release and a GPU for real numbers::

    OMP_NUM_THREADS=1 python benchmarks/bench_wan.py [--envs 1 4 8]
    python benchmarks/bench_wan.py --model /path/to/RLinf-Wan-LIBERO-Spatial --device cuda
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(model, batch: int, repeats: int, chunk: int = 8) -> dict[str, float]:
    """Seconds per chunk (total and per stage) and frames/s for ``batch`` envs."""
    from rlinf_wm_wan import vae as wan_vae

    device, S = model.device, model.image_size
    frames = torch.randint(0, 256, (batch, 5, S, S, 3), dtype=torch.uint8, device=device)
    state = model.init_state(frames, torch.zeros(batch, 5, 7, device=device))
    actions = torch.rand(batch, chunk, 7, device=device) * 2 - 1
    stages = {"encode": 0.0, "decode": 0.0}
    enc, dec = wan_vae.encode, wan_vae.decode

    def timed(name, fn):
        def wrapper(*args):
            _sync(device)
            t = time.perf_counter()
            out = fn(*args)
            _sync(device)
            stages[name] += time.perf_counter() - t
            return out

        return wrapper

    import rlinf_wm_wan.world_model as wm

    with torch.no_grad():
        model.predict(state, actions)  # warm-up
        wm.encode, wm.decode = timed("encode", enc), timed("decode", dec)
        try:
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(repeats):
                _, state = model.predict(state, actions)
            _sync(device)
            total = (time.perf_counter() - t0) / repeats
        finally:
            wm.encode, wm.decode = enc, dec
    encode_s, decode_s = stages["encode"] / repeats, stages["decode"] / repeats
    return {
        "chunk_s": total,
        "encode_s": encode_s,
        "decode_s": decode_s,
        "dit_s": total - encode_s - decode_s,
        "frames_per_s": batch * chunk / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a release directory (default: a tiny random one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--steps", type=int, default=None, help="inference steps (default: 2 tiny, 5 real)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from rlinf_wm_wan import WanWorldModel
    from rlinf_wm_wan.make_tiny import make_tiny

    path = args.model or str(make_tiny(tempfile.mkdtemp(prefix="wan-bench-")))
    steps = args.steps or (5 if args.model else 2)
    model = WanWorldModel(model_path=path, num_inference_steps=steps).to(args.device).eval()
    print(
        f"Wan world model {path} on {args.device} ({model.compute_dtype}), {model.image_size} px, {steps} steps, "
        f"{sum(p.numel() for p in model.dit.parameters()) / 1e6:.1f} M DiT parameters, "
        f"threads {torch.get_num_threads()}"
    )
    print(f"{'envs':>5} {'chunk s':>9} {'encode':>8} {'DiT':>8} {'decode':>8} {'frames/s':>9} {'ratio':>8}")
    base = None
    for n in args.envs:
        r = run(model, n, args.repeats)
        base = base or r["frames_per_s"]  # frames/s of the first batch size (1 env by default)
        ratio = r["frames_per_s"] / base
        print(
            f"{n:>5} {r['chunk_s']:>9.3f} {r['encode_s']:>8.3f} {r['dit_s']:>8.3f} {r['decode_s']:>8.3f} "
            f"{r['frames_per_s']:>9.1f} {ratio:>8.2f}x"
        )


if __name__ == "__main__":
    main()
