"""A small OpenSora world model for MetaWorld, made from recorded episodes (the loop's ``world_model_init`` stage).

    python examples/metaworld_imagination/prepare_world_model.py --rollouts DIR --out DIR [--vae-steps 300]

At real scale the world model starts from the released checkpoint (its SDXL VAE is pretrained). Here nothing may be
downloaded, so this writes the released directory layout with ``rlinf_wm_opensora.make_tiny`` (a small random
STDiT3 with 4-D MetaWorld actions), then makes the two things a random model lacks:

1. ``dataset_statistics.json``: q01 / q99 of the recorded actions (the world model normalises actions with them);
2. ``vae/``: an ``AutoencoderKL`` trained on the recorded frames (reconstruction + a small KL term), its latent
   rescaled so that ``latent · 0.13025`` (the OpenSora scale) has unit standard deviation, as SDXL's has.

It also writes ``init_states/``: one-frame init files (the env's reset format) from steps ``--init-steps`` of every
recorded episode, so that imagined episodes can start part-way through a real one (shorter imagined horizons).

``resnet_rm.pth`` is a freshly initialised ResNet-18 (trained by the ``reward_model`` stage); the DiT is trained by
the ``world_model`` stage (``WorldModelTrainer``, rectified flow).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from rlinf_core.world_models.datasets import find_trajectories, load_episode

VAE = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
           up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(16, 32, 32, 64), layers_per_block=1,
           latent_channels=4, norm_num_groups=8)  # fmt: skip
OPENSORA_SCALE = 0.13025


def action_statistics(actions: np.ndarray) -> dict:
    """``dataset_statistics.json`` of actions ``[N, D]`` in the released form; a constant dimension gets ±1."""
    q01, q99 = np.quantile(actions, 0.01, axis=0), np.quantile(actions, 0.99, axis=0)
    flat = q99 - q01 < 1e-6
    q01, q99 = np.where(flat, q01 - 1, q01), np.where(flat, q99 + 1, q99)
    stats = {"mean": actions.mean(0), "std": actions.std(0), "max": actions.max(0), "min": actions.min(0),
             "q01": q01, "q99": q99, "mask": [True] * (actions.shape[1] - 1) + [False]}  # fmt: skip
    return {"action": {k: np.asarray(v).tolist() for k, v in stats.items()}, "num_transitions": len(actions)}


def train_vae(frames: np.ndarray, steps: int, batch: int, lr: float, seed: int):
    """An ``AutoencoderKL`` fitted to uint8 frames ``[N, H, W, 3]``; returns (vae, reconstruction MSE in [-1, 1])."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    vae = AutoencoderKL(**VAE, sample_size=frames.shape[1])
    opt = torch.optim.AdamW(vae.parameters(), lr=lr, weight_decay=0.0)
    warmup_cosine = lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    data = torch.from_numpy(frames).permute(0, 3, 1, 2)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        x = data[rng.integers(0, len(data), batch)].float() / 127.5 - 1
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample()).sample
        loss = torch.nn.functional.mse_loss(rec, x) + 1e-6 * post.kl().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == steps - 1:
            print(f"vae step {step}: loss {loss.item():.4f}", flush=True)
    vae.eval()
    with torch.no_grad():
        x = data[rng.integers(0, len(data), 256)].float() / 127.5 - 1
        mean = vae.encode(x).latent_dist.mean
        mse = torch.nn.functional.mse_loss(vae.decode(mean).sample.clamp(-1, 1), x).item()
        rescale_latent(vae, 1.0 / (OPENSORA_SCALE * mean.std().item()))
    return vae, mse


@torch.no_grad()
def rescale_latent(vae, k: float) -> None:
    """Scale the VAE's latent by ``k`` without changing what it reconstructs: the posterior mean rows of
    ``quant_conv`` by ``k`` (log-variance + 2 log k), the input of ``post_quant_conv`` by ``1 / k``."""
    C = vae.config.latent_channels
    vae.quant_conv.weight[:C] *= k
    vae.quant_conv.bias[:C] *= k
    vae.quant_conv.bias[C:] += 2 * math.log(k)
    vae.post_quant_conv.weight /= k


def write_init_states(episodes: list, steps: list[int], root: Path) -> None:
    """One-frame init files (frame ``k`` of each episode, its instruction) for every ``k`` in ``steps``."""
    from rlinf_core.world_models.init_data import save_init_trajectory

    for i, e in enumerate(episodes):
        for k in steps:
            if k < len(e.frames):
                save_init_trajectory(root / f"traj{i:04d}_step{k:03d}.npy", e.frames[k : k + 1], e.instruction,
                                     np.zeros((1, e.actions.shape[1]), np.float32))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rollouts", required=True, help="directory of recorded traj*.npy episodes")
    p.add_argument("--out", required=True, help="the world-model directory to write (released layout)")
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--vae-steps", type=int, default=300)
    p.add_argument("--vae-batch", type=int, default=16)
    p.add_argument("--vae-lr", type=float, default=2e-3)
    p.add_argument("--init-steps", type=int, nargs="+", default=[0], help="env steps of the init_states/ frames")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from rlinf_core.world_models.reward_models import ResnetRewardModel
    from rlinf_wm_opensora.make_tiny import write_tiny

    t0 = time.perf_counter()
    episodes = [load_episode(f) for f in find_trajectories(args.rollouts)]
    frames = np.concatenate([e.frames for e in episodes])
    actions = np.concatenate([e.actions[1:] for e in episodes])  # frame 0's action is the zero pad
    size, action_dim = frames.shape[1], actions.shape[1]
    print(f"{len(episodes)} episodes, {len(frames)} frames of {size} px, {action_dim}-D actions", flush=True)
    out = Path(args.out)
    write_tiny(out, image_size=size, num_trajectories=1, seed=args.seed, action_dim=action_dim,
               hidden_size=args.hidden_size, depth=args.depth, num_heads=args.num_heads)  # fmt: skip
    shutil.rmtree(out / "dataset")  # the env starts from the recorded episodes instead
    torch.manual_seed(args.seed)  # make_tiny's classifier is calibrated on its random frames: start from plain init
    ResnetRewardModel().save_pretrained(out / "resnet_rm.pth")
    (out / "dataset_statistics.json").write_text(json.dumps(action_statistics(actions), indent=2) + "\n")
    write_init_states(episodes, args.init_steps, out / "init_states")
    vae, mse = train_vae(frames, args.vae_steps, args.vae_batch, args.vae_lr, args.seed)
    shutil.rmtree(out / "vae")
    vae.save_pretrained(out / "vae")
    report = {"episodes": len(episodes), "frames": len(frames), "vae_reconstruction_mse": mse,
              "seconds": time.perf_counter() - t0}  # fmt: skip
    (out / "prepare.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
