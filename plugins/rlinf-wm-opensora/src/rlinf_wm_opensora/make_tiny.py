"""Write a tiny random OpenSora world model directory in exactly the released layout.

    python -m rlinf_wm_opensora.make_tiny DIR [--image-size 32] [--num-trajectories 4] [--seed 0]

Files: ``config.json`` (STDiT3: hidden 32, depth 2, 2 heads, caption_channels 8, model_max_length 4),
``model-00001.safetensors`` + ``model.safetensors.index.json``, ``vae/`` (diffusers ``AutoencoderKL``, block
channels 8/8/16/16, 8× down-sampling), ``resnet_rm.pth`` (core's ResNet-18 reward classifier, random),
``dataset_statistics.json`` (q01/q99 on 7 dims) and ``dataset/traj*.npy`` (one coloured frame each, an instruction).
Real scale is the product; this is how it is tested on CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from rlinf_core.world_models import ResnetRewardModel, condition_inputs, load_init_trajectory, save_init_trajectory
from rlinf_wm_opensora._modeling import STDiT3, STDiT3Config
from rlinf_wm_opensora.world_model import OpenSoraWorldModel

TINY_CONFIG = dict(hidden_size=32, depth=2, num_heads=2, caption_channels=8, model_max_length=4)
TINY_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    block_out_channels=(8, 8, 16, 16),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
)
INSTRUCTIONS = ("pick up the black bowl and place it on the plate", "put the bowl on the stove")


def action_statistics(action_dim: int = 7) -> dict:
    """``dataset_statistics.json`` content in the released form (LIBERO-like delta-action ranges)."""
    q99 = np.array([0.9, 0.9, 0.9, 0.3, 0.3, 0.3, 1.0][:action_dim] + [1.0] * max(0, action_dim - 7), np.float32)
    q01 = -q99
    stats = {
        "mean": np.zeros(action_dim),
        "std": q99 / 2,
        "max": q99 * 1.1,
        "min": q01 * 1.1,
        "q01": q01,
        "q99": q99,
        "mask": [True] * (action_dim - 1) + [False],
    }
    return {
        "action": {k: np.asarray(v).tolist() for k, v in stats.items()},
        "num_transitions": 1000,
        "num_trajectories": 10,
    }


def init_image(rng: np.random.Generator, size: int) -> np.ndarray:
    """A coloured background with a bright square (a table and an object), uint8 ``[size, size, 3]``."""
    img = np.empty((size, size, 3), np.uint8)
    img[:] = rng.integers(40, 120, 3, dtype=np.uint8)
    s = max(2, size // 4)
    y, x = rng.integers(0, size - s, 2)
    img[y : y + s, x : x + s] = rng.integers(150, 256, 3, dtype=np.uint8)
    return img


def write_tiny(
    path: str | Path, image_size: int = 32, num_trajectories: int = 4, seed: int = 0, **config_overrides
) -> Path:
    """Write the tiny world model directory at ``path``; returns it.

    Args:
        path: output directory (created).
        image_size: frame side in pixels (a multiple of 16).
        num_trajectories: ``dataset/traj*.npy`` init files.
        seed: seed of every random weight and image.
        **config_overrides: STDiT3Config fields replacing the tiny defaults.
    """
    from diffusers import AutoencoderKL

    if image_size % 16:
        raise ValueError(f"image_size must be a multiple of 16 (8x VAE, 2x2 patches), got {image_size}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = STDiT3Config(**{**TINY_CONFIG, **config_overrides})
    config.to_json(path / "config.json", image_size=image_size, architectures=["STDiT3"])
    dit = STDiT3(config)
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in dit.state_dict().items()}
    save_file(state, str(path / "model-00001.safetensors"), metadata={"format": "pt"})
    index = {
        "metadata": {"total_size": sum(v.numel() * v.element_size() for v in state.values())},
        "weight_map": {k: "model-00001.safetensors" for k in sorted(state)},
    }
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")

    vae_config = {**TINY_VAE, "latent_channels": config.in_channels}  # the DiT's latent is the VAE's
    AutoencoderKL(**vae_config, sample_size=image_size).save_pretrained(path / "vae")
    (path / "dataset_statistics.json").write_text(json.dumps(action_statistics(config.action_dim), indent=2) + "\n")

    rng = np.random.default_rng(seed)
    for i in range(num_trajectories):
        img = init_image(rng, image_size)
        save_init_trajectory(
            path / "dataset" / f"traj{i}.npy",
            img[None],
            INSTRUCTIONS[i % len(INSTRUCTIONS)],
            np.zeros((1, config.action_dim), np.float32),
        )
    calibrated_reward_model(path, seed).save_pretrained(path / "resnet_rm.pth")
    return path


@torch.no_grad()
def calibrated_reward_model(path: Path, seed: int):
    """A random ResNet-18 reward classifier calibrated on frames the tiny world model generates from random
    actions: its bias puts their 95th-percentile logit at 0, so a few frames count as success and GRPO groups
    of 32-step episodes get mixed outcomes."""

    torch.manual_seed(seed)
    rm = ResnetRewardModel().eval()
    wm = OpenSoraWorldModel(str(path), num_sampling_steps=2).eval()
    files = sorted((path / "dataset").glob("traj*.npy"))
    cond = [condition_inputs(load_init_trajectory(f), wm.condition, wm.action_dim) for f in files]
    frames = torch.from_numpy(np.stack([c[0] for c in cond]))
    state = wm.init_state(frames, torch.from_numpy(np.stack([c[1] for c in cond])))
    gen = torch.Generator().manual_seed(seed)
    out, _ = wm.predict(state, torch.rand(len(files), wm.chunk, wm.action_dim, generator=gen) * 2 - 1, gen)
    logits = rm.success_logits(out.flatten(0, 1))
    rm.net[-2].bias -= torch.quantile(logits, 0.95)
    gain = 4.0 / max(float(logits.std()), 1e-6)  # a spread of about ±4 logits
    rm.net[-2].weight.mul_(gain)
    rm.net[-2].bias.mul_(gain)
    return rm


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-trajectories", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = write_tiny(args.path, args.image_size, args.num_trajectories, args.seed)
    print(f"tiny OpenSora world model written to {out}")


if __name__ == "__main__":
    main()
