"""OpenVLA image resize: ``image_resize: tensor`` (RLinf's rollout) vs ``pil`` (openvla/openvla's processor).

Times :func:`rlinf_policy_openvla.processing.resize_images` on a batch of uint8 camera frames (LIBERO 256×256,
ManiSkill 480×640) resized to the towers' 224, on the CPU, and prints seconds per batch, the ratio pil / tensor and
how far the two paths are apart (max grey levels, fraction of pixels that differ)::

    OMP_NUM_THREADS=1 python benchmarks/bench_openvla_image_resize.py [--batch 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import torch

from rlinf_policy_openvla.processing import resize_images


def _frames(batch: int, h: int, w: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    base = torch.linspace(0, 255, w).view(1, 1, w, 1).expand(batch, h, w, 3)
    return (base + torch.randint(-40, 41, (batch, h, w, 3), generator=gen)).clamp(0, 255).to(torch.uint8)


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for h, w in ((256, 256), (480, 640)):
        frames = _frames(args.batch, h, w)
        t_tensor = _best_of(lambda: resize_images(frames, 224, mode="tensor"), args.repeats)
        t_pil = _best_of(lambda: resize_images(frames, 224, mode="pil"), args.repeats)
        diff = (resize_images(frames, 224, mode="tensor") - resize_images(frames, 224, mode="pil")).abs()
        print(
            f"{args.batch}x{h}x{w} -> 224: tensor {t_tensor * 1e3:.1f} ms, pil {t_pil * 1e3:.1f} ms,"
            f" pil/tensor {t_pil / t_tensor:.2f}; max |tensor - pil| {diff.max().item():.0f} levels,"
            f" {(diff > 0).float().mean().item():.1%} of values differ"
        )


if __name__ == "__main__":
    main()
