"""Write a tiny random Wan world model in the released ``RLinf-Wan-LIBERO-*`` layout.

    python -m rlinf_wm_wan.make_tiny DIR [--reward resnet|taskemb] [--image-size 64] [--num-init 4] [--seed 0]

``DIR`` gets what a download has — ``model-00001.safetensors`` (DiT, DiffSynth names), ``Wan2.2_VAE.pth``
(original Wan names), ``resnet_rm.pth`` (or ``taskemb_resnet_rm.pth``), ``dataset/traj*.npy`` (1 frame) and
``dataset/traj*_kir.npy`` (5 frames: the reference + 4 key-frame context frames with their actions) — plus the
side-car ``wan_config.json`` with the tiny sizes (DiT dim 24, 2 heads of 12, 2 layers; VAE base 8 / 16; 64 px).
Instructions are LIBERO-Goal tasks, so both reward models accept them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from rlinf.world_models.init_data import save_init_trajectory
from rlinf.world_models.reward_models import LIBERO_TASKS, ResnetRewardModel, TaskEmbedResnetRewardModel
from rlinf_wm_wan._modeling import WanActionTransformer, diffusers_to_diffsynth_key
from rlinf_wm_wan.vae import build_vae, to_original_state_dict
from rlinf_wm_wan.world_model import CONFIG_NAME, DIT_NAME, VAE_NAME

TINY_CONFIG = {
    "dit": {"dim": 24, "ffn_dim": 48, "num_heads": 2, "num_layers": 2, "freq_dim": 32},
    "vae": {"base_dim": 8, "decoder_base_dim": 16},
    "image_size": 64,
}


def scene(rng: np.random.Generator, size: int) -> np.ndarray:
    """A table-top-like frame: a floor colour and two coloured blocks, ``uint8 [size, size, 3]``."""
    img = np.empty((size, size, 3), np.uint8)
    img[:] = rng.integers(60, 120, 3, dtype=np.uint8)
    for _ in range(2):
        y, x = rng.integers(4, size - 12, 2)
        img[y : y + 8, x : x + 8] = rng.integers(0, 256, 3, dtype=np.uint8)
    return img


def write_init_data(root: Path, num_init: int, size: int, seed: int) -> None:
    """``traj<i>.npy`` (frame 0) and ``traj<i>_kir.npy`` (frame 0 + 4 later frames and their actions)."""
    rng = np.random.default_rng(seed)
    tasks = LIBERO_TASKS["libero_goal"]
    for i in range(num_init):
        first = scene(rng, size)
        later = np.stack([np.roll(first, 2 * (k + 1), axis=1) for k in range(4)])
        actions = np.concatenate([np.zeros((1, 7)), rng.uniform(-1, 1, (4, 7))]).astype(np.float32)
        actions[1:, -1] = np.sign(actions[1:, -1])  # the gripper is +-1
        save_init_trajectory(root / f"traj{i}.npy", first[None], tasks[i % len(tasks)], actions[:1])
        save_init_trajectory(root / f"traj{i}_kir.npy", np.concatenate([first[None], later]), tasks[i % len(tasks)], actions)


def make_tiny(path: str | Path, reward: str = "resnet", image_size: int = 64, num_init: int = 4, seed: int = 0) -> Path:
    """Write the tiny release to ``path`` and return it."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = {**TINY_CONFIG, "image_size": image_size}
    dit = WanActionTransformer(**config["dit"])
    save_file({diffusers_to_diffsynth_key(k): v.contiguous() for k, v in dit.state_dict().items()}, str(out / DIT_NAME))
    torch.save(to_original_state_dict(build_vae(**config["vae"])), out / VAE_NAME)
    (out / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    if reward == "resnet":
        ResnetRewardModel().save_pretrained(out / "resnet_rm.pth")
    elif reward == "taskemb":
        TaskEmbedResnetRewardModel().save_pretrained(out / "taskemb_resnet_rm.pth")
    else:
        raise ValueError(f"--reward must be resnet or taskemb, got {reward!r}")
    write_init_data(out / "dataset", num_init, image_size, seed)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--reward", default="resnet", choices=["resnet", "taskemb"])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--num-init", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(make_tiny(args.path, args.reward, args.image_size, args.num_init, args.seed))


if __name__ == "__main__":
    main()
