"""The SDXL VAE of the world model: diffusers ``AutoencoderKL`` from ``<dir>/vae``, applied frame by frame.

As upstream's ``SDXL`` VAE (``opensora/models/vae/vae.py``): encode ``latent_dist.sample() · 0.13025``, decode
``z / 0.13025``; frames in ``[-1, 1]``, 8× spatial down-sampling, 4 latent channels.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlinf_core.models.weights import load_pth_state_dict, load_safetensors

SCALING_FACTOR = 0.13025
WEIGHT_NAMES = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")


def build_vae(config: dict):
    """``AutoencoderKL`` of a ``vae/config.json`` dict, no weights (random, or meta inside ``meta_init``)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL.from_config(config)


def load_vae(vae_dir: str | Path, load_weights: bool = True):
    """``AutoencoderKL`` built from ``vae/config.json``; weights loaded with strict key checks.

    Args:
        vae_dir: the ``vae`` folder (diffusers layout: ``config.json`` + ``diffusion_pytorch_model.safetensors``).
        load_weights: False builds the architecture only (meta-device builds).
    """
    vae_dir = Path(vae_dir)
    config_path = vae_dir / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"no VAE config at {config_path}: the world-model directory needs vae/config.json")
    vae = build_vae(json.loads(config_path.read_text()))
    if not load_weights:
        return vae
    weights = next((vae_dir / n for n in WEIGHT_NAMES if (vae_dir / n).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f"no VAE weights in {vae_dir}: expected {' or '.join(WEIGHT_NAMES)}")

    state = load_safetensors(str(weights)) if weights.suffix == ".safetensors" else load_pth_state_dict(weights, "VAE")
    state = rename_legacy_attention(state)
    expected = vae.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        key = (missing or unexpected)[0]
        what = "is missing" if missing else "is unexpected"
        raise ValueError(
            f"{weights}: VAE key {key!r} {what} ({len(missing)} missing, {len(unexpected)} unexpected); expected "
            f"diffusers AutoencoderKL keys for vae/config.json (e.g. {next(iter(expected))!r})"
        )
    bad = next((k for k in expected if tuple(state[k].shape) != tuple(expected[k].shape)), None)
    if bad is not None:
        raise ValueError(
            f"{weights}: VAE tensor {bad!r} has shape {list(state[bad].shape)}, vae/config.json builds "
            f"{list(expected[bad].shape)}"
        )
    vae.load_state_dict(state, strict=True)
    return vae


LEGACY_ATTENTION = {"query": "to_q", "key": "to_k", "value": "to_v", "proj_attn": "to_out.0"}


def rename_legacy_attention(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Older diffusers VAE files name the mid-block attention ``query/key/value/proj_attn``; today's
    ``AutoencoderKL`` calls them ``to_q/to_k/to_v/to_out.0`` (diffusers renames them the same way on load)."""
    out = {}
    for key, value in state.items():
        parts = key.rsplit(".", 2)
        if len(parts) == 3 and ".attentions." in key and parts[1] in LEGACY_ATTENTION:
            key = f"{parts[0]}.{LEGACY_ATTENTION[parts[1]]}.{parts[2]}"
        out[key] = value
    return out


def encode_frames(
    vae, frames: torch.Tensor, micro_batch: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Frames ``[N, 3, H, W]`` in ``[-1, 1]`` → latents ``[N, C, H/8, W/8]`` (posterior sample × 0.13025)."""
    dtype = next(vae.parameters()).dtype
    out = []
    for i in range(0, frames.shape[0], micro_batch):
        dist = vae.encode(frames[i : i + micro_batch].to(dtype)).latent_dist
        out.append(dist.sample(generator=generator) * SCALING_FACTOR)
    return torch.cat(out)


def decode_latents(vae, latents: torch.Tensor, micro_batch: int) -> torch.Tensor:
    """Latents ``[N, C, h, w]`` → frames ``[N, 3, 8h, 8w]`` in about ``[-1, 1]``."""
    dtype = next(vae.parameters()).dtype
    out = [
        vae.decode(latents[i : i + micro_batch].to(dtype) / SCALING_FACTOR).sample
        for i in range(0, len(latents), micro_batch)
    ]
    return torch.cat(out)
