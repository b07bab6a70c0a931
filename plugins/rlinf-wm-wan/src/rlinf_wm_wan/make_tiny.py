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

from rlinf_core.world_models import (
    LIBERO_TASKS,
    ResnetRewardModel,
    TaskEmbedResnetRewardModel,
    condition_inputs,
    instruction_of,
    load_init_trajectory,
    save_init_trajectory,
)
from rlinf_wm_wan._modeling import WanActionTransformer, diffusers_to_diffsynth_key
from rlinf_wm_wan.vae import build_vae, to_original_state_dict
from rlinf_wm_wan.world_model import CONFIG_NAME, DIT_NAME, VAE_NAME, WanWorldModel

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
        task = tasks[i % len(tasks)]
        save_init_trajectory(root / f"traj{i}.npy", first[None], task, actions[:1])
        save_init_trajectory(root / f"traj{i}_kir.npy", np.concatenate([first[None], later]), task, actions)


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
    write_init_data(out / "dataset", num_init, image_size, seed)
    if reward not in ("resnet", "taskemb"):
        raise ValueError(f"--reward must be resnet or taskemb, got {reward!r}")
    rm = ResnetRewardModel() if reward == "resnet" else TaskEmbedResnetRewardModel()
    calibrate(rm.eval(), out)
    rm.save_pretrained(out / ("resnet_rm.pth" if reward == "resnet" else "taskemb_resnet_rm.pth"))
    return out


@torch.no_grad()
def calibrate(rm: ResnetRewardModel | TaskEmbedResnetRewardModel, root: Path, seed: int = 0) -> None:
    """Shift and scale the random classifier's last layer so that about half of the chunks the tiny world model
    predicts (random actions and noise, 3 chunks from each key-frame init) contain a frame above 0.5, with
    logits spread to about N(0, 2): a random ResNet otherwise scores every frame alike (all success or none),
    and GRPO groups would never have mixed outcomes."""

    model = WanWorldModel(model_path=str(root), num_inference_steps=2, noise_seed=None)
    trajs = [load_init_trajectory(p) for p in sorted((root / "dataset").glob("*_kir.npy"))]
    inputs = [condition_inputs(t, model.condition, model.action_dim) for t in trajs]
    state = model.init_state(*(torch.from_numpy(np.stack(x)) for x in zip(*inputs)))
    gen = torch.Generator().manual_seed(seed)
    logits = []
    for _ in range(3):
        out, state = model.predict(state, torch.rand(len(trajs), 8, 7, generator=gen) * 2 - 1, generator=gen)
        texts = [instruction_of(t) for t in trajs for _ in range(out.shape[1])]
        logits.append(rm.success_logits(out.reshape(-1, *out.shape[2:]), texts).reshape(len(trajs), -1))
    logits = torch.cat(logits)  # [chunks, 8]
    head = rm.net[-2] if isinstance(rm, ResnetRewardModel) else rm.fusion_layer[-2]
    scale = 2.0 / logits.std().clamp_min(1e-8)  # logits of a random ResNet barely differ
    head.bias.sub_(logits.max(1).values.median()).mul_(scale)
    head.weight.mul_(scale)


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
