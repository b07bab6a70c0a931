"""Released-size OpenVLA-OFT (7.5 B) on one GPU: rollout frames/s and one training micro-batch, bf16.

Builds the architecture of a released checkpoint kind (``rlinf_policy_openvla.released``: its config.json,
tokenizer and norm stats) with random weights directly on the GPU, then times, per batch size B:

* ``act``: one rollout step (OFT parallel decoding of ``num_action_chunks`` x 7 action tokens) under
  ``torch.autocast(bf16)``, as ``precision: bf16`` + ``bf16-mixed`` run it; frames/s = B / time;
* ``update``: ``evaluate`` + backward of the same batch (the PPO / GRPO micro-batch), with gradient
  checkpointing as the shipped configs set it; peak memory from ``torch.cuda.max_memory_allocated``.

Prints ratios against B=1 in one run (GPU timings depend on the card: the device line names it)::

    python benchmarks/bench_gpu_openvla_realsize.py [--kind openvla-oft-sft-libero] [--batches 1 8 32 64]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def build(kind: str, chunks: int, grad_ckpt: bool, device: str, model_path: str | None):
    import rlinf_policy_openvla._modeling as modeling
    from rlinf_policy_openvla import OpenVLAOFTPolicy
    from rlinf_policy_openvla.released import RELEASED, write_released_dir
    from rlinf_policy_openvla.settings import ActionConfig

    # the released-form directory has no weight files: build the network with its own random init on the
    # device instead of on meta, and skip the weight load (the benchmark's only departure from a real load)
    real_build = modeling.build_vla
    modeling.build_vla = lambda spec, **kw: real_build(spec, **{**kw, "meta": False})
    OpenVLAOFTPolicy._load_weights = lambda self, vla, path, dtype: vla.to(dtype)
    path = model_path or write_released_dir(tempfile.mkdtemp(), kind)
    unnorm = None if model_path else RELEASED[kind].norm_keys[-1]
    with torch.device(device):
        policy = OpenVLAOFTPolicy(
            model_path=str(path),
            precision="bf16",
            gradient_checkpointing=grad_ckpt,
            actions=ActionConfig(num_action_chunks=chunks, unnorm_key=unnorm),
        )
    return policy.to(device)


def observation(batch: int, device: str):
    from rlinf_core import Observation

    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (batch, 256, 256, 3), generator=g, dtype=torch.uint8)
    return Observation(
        main_images=imgs,
        task_descriptions=["put the black bowl on the plate"] * batch,
        states=torch.randn(batch, 8, generator=g),
    ).to(device)


def timed(fn, repeats: int, device: str) -> float:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", default="openvla-oft-sft-libero")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model-path", help="a checkpoint directory instead of the released kind (CPU smoke run)")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = dev == "cuda"
    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'} | torch {torch.__version__}")
    t = time.perf_counter()
    policy = build(args.kind, args.chunks, True, dev, args.model_path)
    n = sum(p.numel() for p in policy.parameters())
    mem = torch.cuda.memory_allocated() if cuda else 0
    print(
        f"built {args.model_path or args.kind}: {n / 1e9:.3f} B parameters in {time.perf_counter() - t:.0f} s, "
        f"weights {mem / 2**30:.1f} GiB"
    )
    rows = []
    for b in args.batches:
        obs = observation(b, dev)
        policy.eval()
        with torch.no_grad(), torch.autocast(dev, torch.bfloat16):
            act_s = timed(lambda: policy.act(obs, do_sample=True, temperature=1.6), args.repeats, dev)
            record = policy.act(obs, do_sample=True, temperature=1.6).record
        policy.train()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0

        def update():
            with torch.autocast(dev, torch.bfloat16):
                loss = -policy.evaluate(obs, record, temperature=1.6).logprobs.float().mean()
            loss.backward()
            policy.zero_grad(set_to_none=True)

        upd_s = timed(update, args.repeats, dev)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else float("nan")
        rows.append((b, act_s, upd_s, peak))
        print(
            f"B={b:3d}: act {act_s * 1e3:8.1f} ms ({b / act_s:7.1f} frames/s) | update {upd_s * 1e3:8.1f} ms "
            f"| update peak above weights {peak:6.2f} GiB",
            flush=True,
        )
    b0, a0, u0, _ = rows[0]
    print(f"ratios vs B={b0} (frames/s gain, update time per sample):")
    for b, a, u, _ in rows:
        print(f"  B={b:3d}: throughput x{(b / a) / (b0 / a0):6.2f} | update s/sample x{(u / b) / (u0 / b0):5.2f}")


if __name__ == "__main__":
    main()
