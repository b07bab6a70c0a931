"""The Wan 2.2 VAE (``Wan2.2_VAE.pth``, original Wan key names) as diffusers' ``AutoencoderKLWan``.

``AutoencoderKLWan`` in the 2.2 configuration (residual blocks, 12 = 3·2·2 patchified channels in and out,
48 latent channels, ×16 spatial and ×4 causal temporal compression). The wheel's single-file converter only
knows the Wan 2.1 VAE, so the 2.2 rename is here, strict both ways. Frames: float ``[B, 3, T, H, W]`` in
[-1, 1] with ``T = 1 + 4k``; latents: the *normalised* posterior mean ``(mu - mean) / std``, ``[B, 48, 1 + k,
H/16, W/16]``, as DiffSynth's ``WanVideoVAE38`` returns them (no sampling).
"""

from __future__ import annotations

import re

import torch
from diffusers import AutoencoderKLWan

# fmt: off
LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
    0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
    -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]
LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]
# fmt: on


def build_vae(base_dim: int = 160, decoder_base_dim: int = 256) -> AutoencoderKLWan:
    """``AutoencoderKLWan`` in the Wan 2.2 configuration (5 B: base 160, decoder base 256; tiny: 8 / 16)."""
    return AutoencoderKLWan(
        base_dim=base_dim,
        decoder_base_dim=decoder_base_dim,
        z_dim=48,
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_temporal=4,
        scale_factor_spatial=16,
        latents_mean=LATENTS_MEAN,
        latents_std=LATENTS_STD,
    )


# ------------------------------------------------------------------------------------- original <-> diffusers names

_RESIDUAL = {
    "residual.0.": "norm1.",
    "residual.2.": "conv1.",
    "residual.3.": "norm2.",
    "residual.6.": "conv2.",
    "shortcut.": "conv_shortcut.",
}
_FIXED = {
    "conv1.": "quant_conv.",
    "conv2.": "post_quant_conv.",
    "encoder.conv1.": "encoder.conv_in.",
    "decoder.conv1.": "decoder.conv_in.",
    "encoder.head.0.": "encoder.norm_out.",
    "encoder.head.2.": "encoder.conv_out.",
    "decoder.head.0.": "decoder.norm_out.",
    "decoder.head.2.": "decoder.conv_out.",
}
_MIDDLE = re.compile(r"^(encoder|decoder)\.middle\.([012])\.(.+)$")
_STAGE = re.compile(
    r"^(encoder)\.downsamples\.(\d+)\.downsamples\.(\d+)\.(.+)$"
    r"|^(decoder)\.upsamples\.(\d+)\.upsamples\.(\d+)\.(.+)$"
)
_MID_D = re.compile(r"^(encoder|decoder)\.mid_block\.(resnets|attentions)\.(\d+)\.(.+)$")
_STAGE_D = re.compile(
    r"^(encoder)\.down_blocks\.(\d+)\.(resnets\.(\d+)|downsampler)\.(.+)$"
    r"|^(decoder)\.up_blocks\.(\d+)\.(resnets\.(\d+)|upsampler)\.(.+)$"
)


def _residual(rest: str) -> str:
    for old, new in _RESIDUAL.items():
        if rest.startswith(old):
            return new + rest[len(old) :]
    raise KeyError(rest)


def original_to_diffusers_key(key: str, resample_index: dict[tuple[str, int], int] | None = None) -> str:
    """The diffusers ``AutoencoderKLWan`` name of one original Wan 2.2 VAE key (``KeyError`` if unknown)."""
    for old, new in _FIXED.items():
        if key.startswith(old) and (old.count(".") > 1 or key.count(".") == 1):
            return new + key[len(old) :]
    m = _MIDDLE.match(key)
    if m:
        side, idx, rest = m.groups()
        if idx == "1":  # the attention block
            return f"{side}.mid_block.attentions.0.{rest}"
        return f"{side}.mid_block.resnets.{int(idx) // 2}.{_residual(rest)}"
    m = _STAGE.match(key)
    if m:
        side, stage, j, rest = [g for g in m.groups() if g is not None]
        blocks = "down_blocks" if side == "encoder" else "up_blocks"
        if rest.startswith(("resample.", "time_conv.")):
            sampler = "downsampler" if side == "encoder" else "upsampler"
            return f"{side}.{blocks}.{stage}.{sampler}.{rest}"
        return f"{side}.{blocks}.{stage}.resnets.{j}.{_residual(rest)}"
    raise KeyError(key)


def diffusers_to_original_key(key: str, num_res_blocks: dict[tuple[str, int], int]) -> str:
    """Inverse of :func:`original_to_diffusers_key`; ``num_res_blocks[(side, stage)]`` gives the index of a
    stage's resampler in the original list (it follows the stage's residual blocks)."""
    for old, new in _FIXED.items():
        if key.startswith(new):
            return old + key[len(new) :]
    m = _MID_D.match(key)
    if m:
        side, kind, idx, rest = m.groups()
        if kind == "attentions":
            return f"{side}.middle.1.{rest}"
        inv = {v: k for k, v in _RESIDUAL.items()}
        for new, old in inv.items():
            if rest.startswith(new):
                return f"{side}.middle.{2 * int(idx)}.{old}{rest[len(new) :]}"
    m = _STAGE_D.match(key)
    if m:
        g = m.groups()
        side, stage, which, j, rest = g[0:5] if g[0] else g[5:10]
        orig = "downsamples" if side == "encoder" else "upsamples"
        if j is None:  # the resampler sits after the stage's residual blocks
            return f"{side}.{orig}.{stage}.{orig}.{num_res_blocks[(side, int(stage))]}.{rest}"
        inv = {v: k for k, v in _RESIDUAL.items()}
        for new, old in inv.items():
            if rest.startswith(new):
                return f"{side}.{orig}.{stage}.{orig}.{j}.{old}{rest[len(new) :]}"
    raise KeyError(key)


def to_original_state_dict(vae: AutoencoderKLWan) -> dict[str, torch.Tensor]:
    """``vae``'s weights under the original Wan 2.2 names (the released ``Wan2.2_VAE.pth`` layout)."""
    state = vae.state_dict()
    counts: dict[tuple[str, int], int] = {}
    for key in state:
        m = _STAGE_D.match(key)
        if m:
            g = m.groups()
            side, stage, _, j, _ = g[0:5] if g[0] else g[5:10]
            if j is not None:
                counts[(side, int(stage))] = max(counts.get((side, int(stage)), 0), int(j) + 1)
    return {diffusers_to_original_key(k, counts): v.clone() for k, v in state.items()}


def load_vae_state_dict(state: dict[str, torch.Tensor], vae: AutoencoderKLWan, source: str) -> None:
    """Load original-named Wan 2.2 VAE weights (raw, or under ``model_state`` / a ``model.`` prefix as DiffSynth
    accepts them) into ``vae``; strict, one-line ``ValueError`` naming the first bad key."""
    if "model_state" in state and isinstance(state["model_state"], dict):
        state = state["model_state"]
    if state and all(k.startswith("model.") for k in state):
        state = {k[len("model.") :]: v for k, v in state.items()}
    expected = vae.state_dict()
    out = {}
    for key, value in state.items():
        try:
            new = original_to_diffusers_key(key)
        except KeyError:
            raise ValueError(
                f"{source}: unexpected key {key!r} for the Wan 2.2 VAE (original Wan names, e.g. "
                "'encoder.downsamples.0.downsamples.0.residual.0.gamma')"
            ) from None
        if new not in expected:
            raise ValueError(f"{source}: key {key!r} has no place in this Wan 2.2 VAE (is it a Wan 2.1 VAE?)")
        if tuple(value.shape) != tuple(expected[new].shape):
            raise ValueError(
                f"{source}: {key!r} has shape {list(value.shape)}, the Wan 2.2 VAE expects {list(expected[new].shape)}"
                " (wrong vae dims in wan_config.json?)"
            )
        out[new] = value
    missing = sorted(set(expected) - set(out))
    if missing:
        raise ValueError(f"{source}: missing {len(missing)} VAE key(s), e.g. diffusers {missing[0]!r}")
    vae.load_state_dict(out, strict=True, assign=any(p.is_meta for p in vae.parameters()))


def _stats(vae: AutoencoderKLWan, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (1, -1, 1, 1, 1)
    mean = torch.tensor(vae.config.latents_mean, device=like.device, dtype=like.dtype).view(shape)
    std = torch.tensor(vae.config.latents_std, device=like.device, dtype=like.dtype).view(shape)
    return mean, std


def encode(vae: AutoencoderKLWan, video: torch.Tensor) -> torch.Tensor:
    """Normalised mean latents ``[B, 48, 1 + (T-1)/4, H/16, W/16]`` of ``video [B, 3, T, H, W]`` in [-1, 1]."""
    if (video.shape[2] - 1) % 4:
        raise ValueError(f"the Wan VAE encodes 1 + 4k frames, got {video.shape[2]}")
    mu = vae.encode(video).latent_dist.mode()
    mean, std = _stats(vae, mu)
    return (mu - mean) / std


def decode(vae: AutoencoderKLWan, latents: torch.Tensor) -> torch.Tensor:
    """Frames ``[B, 3, 1 + 4(F-1), H, W]`` in [-1, 1] of normalised ``latents [B, 48, F, h, w]``."""
    mean, std = _stats(vae, latents)
    return vae.decode(latents * std + mean).sample
