"""A small OpenSora world model for MetaWorld, made from recorded episodes (the loop's ``world_model_init`` stage).

    python examples/metaworld_imagination/prepare_world_model.py --rollouts DIR --out DIR [--vae-steps 300]
        [--vae-seconds S] [--device cuda] [--latent-channels 4] [--vae-motion-weight 0] [--action-tokens]
        [--heldout DIR]

At real scale the world model starts from the released checkpoint (its SDXL VAE is pretrained). Here nothing may be
downloaded, so this writes the released directory layout with ``rlinf_wm_opensora.make_tiny`` (a small random
STDiT3 with 4-D MetaWorld actions), then makes the two things a random model lacks:

1. ``dataset_statistics.json``: q01 / q99 of the recorded actions (the world model normalises actions with them);
2. ``vae/``: an ``AutoencoderKL`` trained on the recorded frames (reconstruction + a small KL term), its latent
   rescaled so that ``latent · 0.13025`` (the OpenSora scale) has unit standard deviation, as SDXL's has.

``--heldout DIR`` adds ``vae_floor_heldout`` to ``prepare.json``: the VAE's reconstruction error against one step of
real motion, over all pixels and over the moving ones (docs/imagination.md, "Levers toward a responding world model").

``--vae-seconds S`` trains the VAE for as many steps as ``S`` seconds allow instead of ``--vae-steps`` (the step
time is measured over the first steps, and the count set from it, so that the learning-rate schedule ends on time).

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
# with --vae-seconds, the step count is set from the time of the first 20 steps and set again after 100 and 500
# (a start shared with other processes is slower than the rest): early in the warm-up / cosine schedule
TIMED = (20, 100, 500)
MOTION_THRESHOLD = 8 / 255  # a pixel "moves" between two frames when a channel changes by more than this ([0, 1])


def vae_config(latent_channels: int = 4) -> dict:
    """The ``AutoencoderKL`` of this example: ``VAE`` (8x down-sampling, as the world model's DiT expects) with
    ``latent_channels`` channels."""
    return {**VAE, "latent_channels": latent_channels}


def frame_pairs(episodes: list) -> np.ndarray:
    """Consecutive frames of every episode: uint8 ``[N, 2, H, W, 3]``."""
    return np.concatenate([np.stack([e.frames[:-1], e.frames[1:]], 1) for e in episodes if len(e.frames) > 1])


def motion_mask(pairs: torch.Tensor) -> torch.Tensor:
    """``[N, 2, 3, H, W]`` frames in ``[-1, 1]`` → ``[N, 1, 1, H, W]`` float, 1 where a channel changes by more
    than ``MOTION_THRESHOLD`` between the two frames."""
    change = (pairs[:, 1] - pairs[:, 0]).abs().amax(1, keepdim=True)[:, None] / 2  # [-1, 1] → [0, 1] units
    return (change > MOTION_THRESHOLD).float()


def reconstruction_loss(rec: torch.Tensor, x: torch.Tensor, mask: torch.Tensor | None, motion_weight: float):
    """Pixel MSE; with ``motion_weight > 0`` the pixels under ``mask`` weigh ``1 + motion_weight`` (normalised
    so that the mean weight is 1): the few pixels the arm changes are otherwise a rounding error of the loss."""
    err = (rec - x) ** 2
    if mask is None or motion_weight <= 0:
        return err.mean()
    w = 1 + motion_weight * mask.expand_as(err)
    return (w * err).sum() / w.sum()


def action_statistics(actions: np.ndarray) -> dict:
    """``dataset_statistics.json`` of actions ``[N, D]`` in the released form; a constant dimension gets ±1."""
    q01, q99 = np.quantile(actions, 0.01, axis=0), np.quantile(actions, 0.99, axis=0)
    flat = q99 - q01 < 1e-6
    q01, q99 = np.where(flat, q01 - 1, q01), np.where(flat, q99 + 1, q99)
    stats = {"mean": actions.mean(0), "std": actions.std(0), "max": actions.max(0), "min": actions.min(0),
             "q01": q01, "q99": q99, "mask": [True] * (actions.shape[1] - 1) + [False]}  # fmt: skip
    return {"action": {k: np.asarray(v).tolist() for k, v in stats.items()}, "num_transitions": len(actions)}


def train_vae(
    pairs: np.ndarray,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    latent_channels: int = 4,
    motion_weight: float = 0.0,
    seconds: float | None = None,
    device: str = "cpu",
):
    """An ``AutoencoderKL`` fitted to consecutive frame pairs ``uint8 [N, 2, H, W, 3]`` (``batch // 2`` pairs a
    step; ``motion_weight``: see :func:`reconstruction_loss`) on ``device``; with ``seconds``, as many steps as fit
    in that time (:func:`steps_in` after each of :data:`TIMED` steps) instead of ``steps``. Returns (vae on
    ``device``, reconstruction MSE in [-1, 1], steps trained)."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    vae = AutoencoderKL(**vae_config(latent_channels), sample_size=pairs.shape[2]).to(device)
    opt = torch.optim.AdamW(vae.parameters(), lr=lr, weight_decay=0.0)
    total = [steps if seconds is None else 10**9]  # with ``seconds``: set from the step time (TIMED)
    warmup_cosine = lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s / total[0], 1)))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    data = torch.from_numpy(pairs).permute(0, 1, 4, 2, 3)  # [N, 2, 3, H, W]
    rng = np.random.default_rng(seed)
    t0, step = time.perf_counter(), 0
    while step < total[0]:
        xp = data[rng.integers(0, len(data), max(1, batch // 2))].to(device).float() / 127.5 - 1
        x = xp.flatten(0, 1)
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample()).sample
        mask = motion_mask(xp).expand(-1, 2, -1, -1, -1).flatten(0, 1) if motion_weight > 0 else None
        loss = reconstruction_loss(rec, x, mask, motion_weight) + 1e-6 * post.kl().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if seconds is not None and step in TIMED:
            loss.item()  # waits for the device
            total[0] = steps_in(seconds, time.perf_counter() - t0, step)
            print(f"vae: {step} steps in {time.perf_counter() - t0:.1f} s: {total[0]} steps in {seconds:.0f} s",
                  flush=True)  # fmt: skip
        if step % 25 == 1 or step == total[0]:
            print(f"vae step {step - 1}: loss {loss.item():.4f}", flush=True)
    vae.eval()
    with torch.no_grad():
        x = data[rng.integers(0, len(data), 128)].flatten(0, 1).to(device).float() / 127.5 - 1
        mean = vae.encode(x).latent_dist.mean
        mse = torch.nn.functional.mse_loss(vae.decode(mean).sample.clamp(-1, 1), x).item()
        rescale_latent(vae, 1.0 / (OPENSORA_SCALE * mean.std().item()))
    return vae, mse, step


def steps_in(seconds: float, elapsed: float, done: int) -> int:
    """How many steps in all fit in ``seconds`` when the first ``done`` took ``elapsed`` seconds (at least
    ``done``: those are trained already)."""
    return max(done, int(seconds * done / max(elapsed, 1e-9)))


@torch.no_grad()
def rescale_latent(vae, k: float) -> None:
    """Scale the VAE's latent by ``k`` without changing what it reconstructs: the posterior mean rows of
    ``quant_conv`` by ``k`` (log-variance + 2 log k), the input of ``post_quant_conv`` by ``1 / k``."""
    C = vae.config.latent_channels
    vae.quant_conv.weight[:C] *= k
    vae.quant_conv.bias[:C] *= k
    vae.quant_conv.bias[C:] += 2 * math.log(k)
    vae.post_quant_conv.weight /= k


@torch.no_grad()
def vae_floor(vae, pairs: np.ndarray, batch: int = 64) -> dict:
    """What the VAE loses against what one step of motion changes, on frame pairs ``uint8 [N, 2, H, W, 3]``, in
    ``[0, 1]`` pixel units: ``reconstruction_mse`` (encode the mean, decode, all pixels), ``motion_mse`` (frame
    ``t + 1`` against frame ``t``), and both on the moving pixels only (:func:`motion_mask` of the pair)."""
    sums = np.zeros(5)
    device = next(vae.parameters()).device
    for i in range(0, len(pairs), batch):
        xp = torch.from_numpy(pairs[i : i + batch]).permute(0, 1, 4, 2, 3).to(device).float() / 127.5 - 1
        mask = motion_mask(xp)[:, 0].expand(-1, 3, -1, -1)  # [N, 3, H, W]
        x1 = xp[:, 1]
        rec = vae.decode(vae.encode(x1).latent_dist.mean).sample.clamp(-1, 1)
        rec_err, motion_err = ((rec - x1) / 2) ** 2, ((x1 - xp[:, 0]) / 2) ** 2
        sums += [t.item() for t in (rec_err.sum(), motion_err.sum(), (rec_err * mask).sum(), (motion_err * mask).sum(),
                                    mask.sum())]  # fmt: skip
    n = pairs.shape[0] * 3 * pairs.shape[2] * pairs.shape[3]
    moving = max(sums[4], 1.0)
    return {"reconstruction_mse": sums[0] / n, "motion_mse": sums[1] / n, "reconstruction_mse_moving": sums[2] / moving,
            "motion_mse_moving": sums[3] / moving, "moving_fraction": sums[4] / n}  # fmt: skip


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
    p.add_argument("--vae-seconds", type=float, default=None, help="train the VAE for this long instead of --vae-steps")
    p.add_argument("--device", default="cpu", help="where the VAE trains (cpu, cuda)")
    p.add_argument("--vae-batch", type=int, default=16)
    p.add_argument("--vae-lr", type=float, default=2e-3)
    p.add_argument("--latent-channels", type=int, default=4, help="the VAE's latent channels (= the DiT's)")
    p.add_argument(
        "--vae-motion-weight",
        type=float,
        default=0.0,
        help="extra loss weight of the pixels that change between consecutive frames",
    )
    p.add_argument(
        "--action-tokens",
        action="store_true",
        help="the DiT also adds each frame's action embedding to its tokens (STDiT3Config.action_tokens)",
    )
    p.add_argument("--heldout", default=None, help="episodes to measure the VAE on (vae_floor in prepare.json)")
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
               hidden_size=args.hidden_size, depth=args.depth, num_heads=args.num_heads,
               in_channels=args.latent_channels, action_tokens=args.action_tokens)  # fmt: skip
    shutil.rmtree(out / "dataset")  # the env starts from the recorded episodes instead
    torch.manual_seed(args.seed)  # make_tiny's classifier is calibrated on its random frames: start from plain init
    ResnetRewardModel().save_pretrained(out / "resnet_rm.pth")
    (out / "dataset_statistics.json").write_text(json.dumps(action_statistics(actions), indent=2) + "\n")
    write_init_states(episodes, args.init_steps, out / "init_states")
    vae, mse, vae_steps = train_vae(frame_pairs(episodes), args.vae_steps, args.vae_batch, args.vae_lr, args.seed,
                                    args.latent_channels, args.vae_motion_weight, args.vae_seconds,
                                    args.device)  # fmt: skip
    shutil.rmtree(out / "vae")
    vae.to("cpu").save_pretrained(out / "vae")
    report = {"episodes": len(episodes), "frames": len(frames), "vae_steps": vae_steps, "vae_batch": args.vae_batch,
              "vae_reconstruction_mse": mse, "vae_seconds": time.perf_counter() - t0}  # fmt: skip
    if args.heldout:
        held = [load_episode(f) for f in find_trajectories(args.heldout)]
        report["vae_floor_heldout"] = vae_floor(vae.to(args.device), frame_pairs(held))
    report["seconds"] = time.perf_counter() - t0
    (out / "prepare.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
