"""The action-conditioned Wan 2.2 TI2V-5B DiT of RLinf's world model, on diffusers' ``WanTransformer3DModel``.

RLinf trains the DiT in DiffSynth's ``WanModel`` mode ``TI2V2`` + ``five_frame_condition``: no text encoder;
the raw 7-D actions enter twice — ``action_mlp1`` (Linear(7, d) → GELU → Linear) turns each of the ``T`` actions
into a cross-attention context token, and ``action_mlp2`` (Linear(28, 4d) → SiLU → Linear) turns each group of
4 actions (the first action repeated 3 times in front, so ``T + 3 = 4 · F``) into one vector per latent frame,
added to the time embedding *before* ``time_proj`` so the blocks' modulation and the output head see it.
Timesteps are per token: the first ``num_clean`` latent frames (the encoded condition frames) get ``t = 0``.

Shapes: B batch, C = 48 latent channels, F latent frames, h×w latent pixels, T = 4F - 3 actions of size A.
"""

from __future__ import annotations

import re

import torch
from diffusers import WanTransformer3DModel
from torch import nn

#: the released 5 B DiT (DiffSynth's config for key-hash bc4824aef7c3f23d3378cec6e2b1316c).
DIT_5B = dict(dim=3072, ffn_dim=14336, num_heads=24, num_layers=30, in_dim=48, out_dim=48, freq_dim=256, eps=1e-6)


class WanActionTransformer(WanTransformer3DModel):
    """``WanTransformer3DModel`` with RLinf's action conditioning instead of text.

    Args:
        dim: hidden size (5 B: 3072).
        ffn_dim: feed-forward size (5 B: 14336).
        num_heads: attention heads; the head dim must split RoPE the same way in DiffSynth (``d//3``) and
            diffusers (``2*(d//6)``): 128 (5 B: 24 heads of 128) or a multiple of 6 (tiny: 12).
        num_layers: transformer blocks (5 B: 30).
        in_dim: latent channels in (48, the Wan 2.2 VAE's).
        out_dim: latent channels out (48).
        freq_dim: sinusoidal time-embedding size (256).
        eps: norm epsilon.
        action_dim: action size (7: xyz, rpy, gripper).
        patch_size: (t, h, w) patch of the latent video.
    """

    def __init__(
        self,
        dim: int = 3072,
        ffn_dim: int = 14336,
        num_heads: int = 24,
        num_layers: int = 30,
        in_dim: int = 48,
        out_dim: int = 48,
        freq_dim: int = 256,
        eps: float = 1e-6,
        action_dim: int = 7,
        patch_size: tuple[int, int, int] = (1, 2, 2),
    ) -> None:
        head_dim = dim // num_heads
        if dim % num_heads or head_dim // 3 != 2 * (head_dim // 6):
            raise ValueError(
                f"Wan DiT: head dim {dim}/{num_heads} splits RoPE differently in DiffSynth (d//3) and diffusers "
                "(2*(d//6)); use a head dim such as 128 or a multiple of 6"
            )
        super().__init__(
            patch_size=tuple(patch_size),
            num_attention_heads=num_heads,
            attention_head_dim=head_dim,
            in_channels=in_dim,
            out_channels=out_dim,
            text_dim=1,
            freq_dim=freq_dim,
            ffn_dim=ffn_dim,
            num_layers=num_layers,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=eps,
        )
        self.condition_embedder.text_embedder = None  # no text: the action tokens are the cross-attention context
        self.action_dim = action_dim
        self.action_mlp1 = nn.Sequential(nn.Linear(action_dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.action_mlp2 = nn.Sequential(nn.Linear(4 * action_dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(  # type: ignore[override]
        self, latents: torch.Tensor, timestep: torch.Tensor, actions: torch.Tensor, num_clean: int = 2
    ) -> torch.Tensor:
        """Velocity ``[B, C, F, h, w]`` for noisy ``latents [B, C, F, h, w]`` at ``timestep`` (``[B]`` or scalar,
        0-1000; the first ``num_clean`` latent frames are told 0) given raw ``actions [B, 4F-3, A]``."""
        B, _, F, H, W = latents.shape
        p_t, p_h, p_w = self.config.patch_size
        if actions.shape[1] + 3 != 4 * F // p_t:
            raise ValueError(f"Wan DiT: {actions.shape[1]} actions for {F} latent frames; expected {4 * F - 3}")
        per_frame = (H // p_h) * (W // p_w)
        rotary = self.rope(latents)
        x = self.patch_embedding(latents).flatten(2).transpose(1, 2).contiguous()

        # per-token timesteps, quantised to the compute dtype as upstream feeds them (bf16 on GPU)
        t = timestep.to(x.dtype).float().reshape(-1, 1).expand(B, F // p_t).clone()
        t[:, :num_clean] = 0.0
        t = t.repeat_interleave(per_frame, dim=1)  # [B, S]
        ce = self.condition_embedder
        emb = ce.timesteps_proj(t.flatten()).unflatten(0, (B, -1))
        temb = ce.time_embedder(emb.to(next(ce.time_embedder.parameters()).dtype)).to(x.dtype)  # [B, S, D]

        actions = actions.to(x.dtype)
        context = self.action_mlp1(actions)  # [B, T, D]
        grouped = torch.cat([actions[:, :1].expand(-1, 3, -1), actions], dim=1).reshape(B, F // p_t, -1)
        temb = temb + self.action_mlp2(grouped).repeat_interleave(per_frame, dim=1)
        modulation = ce.time_proj(ce.act_fn(temb)).unflatten(2, (6, -1))  # [B, S, 6, D]

        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                x = self._gradient_checkpointing_func(block, x, context, modulation, rotary)
            else:
                x = block(x, context, modulation, rotary)

        shift, scale = (self.scale_shift_table.unsqueeze(0) + temb.unsqueeze(2)).chunk(2, dim=2)
        x = (self.norm_out(x.float()) * (1 + scale.squeeze(2)) + shift.squeeze(2)).type_as(x)
        x = self.proj_out(x)
        x = x.reshape(B, F // p_t, H // p_h, W // p_w, p_t, p_h, p_w, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.flatten(6, 7).flatten(4, 5).flatten(2, 3)


# ------------------------------------------------------------------------------------- DiffSynth <-> diffusers names

_GLOBAL = {
    "time_embedding.0.": "condition_embedder.time_embedder.linear_1.",
    "time_embedding.2.": "condition_embedder.time_embedder.linear_2.",
    "time_projection.1.": "condition_embedder.time_proj.",
    "head.head.": "proj_out.",
}
_BLOCK = {
    "self_attn.q.": "attn1.to_q.",
    "self_attn.k.": "attn1.to_k.",
    "self_attn.v.": "attn1.to_v.",
    "self_attn.o.": "attn1.to_out.0.",
    "self_attn.norm_q.": "attn1.norm_q.",
    "self_attn.norm_k.": "attn1.norm_k.",
    "cross_attn.q.": "attn2.to_q.",
    "cross_attn.k.": "attn2.to_k.",
    "cross_attn.v.": "attn2.to_v.",
    "cross_attn.o.": "attn2.to_out.0.",
    "cross_attn.norm_q.": "attn2.norm_q.",
    "cross_attn.norm_k.": "attn2.norm_k.",
    "ffn.0.": "ffn.net.0.proj.",
    "ffn.2.": "ffn.net.2.",
    "norm3.": "norm2.",  # DiffSynth's affine cross-attention norm is norm3; diffusers calls it norm2
}
_KEEP = ("patch_embedding.", "action_mlp1.", "action_mlp2.")
_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.(.+)$")


def diffsynth_to_diffusers_key(key: str) -> str:
    """The diffusers name of one DiffSynth ``WanModel`` key (``KeyError`` for a key the action DiT has not)."""
    if key == "head.modulation":
        return "scale_shift_table"
    if key.startswith(_KEEP):
        return key
    for old, new in _GLOBAL.items():
        if key.startswith(old):
            return new + key[len(old) :]
    m = _BLOCK_RE.match(key)
    if m:
        i, rest = m.groups()
        if rest == "modulation":
            return f"blocks.{i}.scale_shift_table"
        for old, new in _BLOCK.items():
            if rest.startswith(old):
                return f"blocks.{i}.{new}{rest[len(old) :]}"
    raise KeyError(key)


def diffusers_to_diffsynth_key(key: str) -> str:
    """Inverse of :func:`diffsynth_to_diffusers_key` (for writing the released layout)."""
    if key == "scale_shift_table":
        return "head.modulation"
    if key.startswith(_KEEP):
        return key
    for old, new in _GLOBAL.items():
        if key.startswith(new):
            return old + key[len(new) :]
    m = _BLOCK_RE.match(key)
    if m:
        i, rest = m.groups()
        if rest == "scale_shift_table":
            return f"blocks.{i}.modulation"
        for old, new in _BLOCK.items():
            if rest.startswith(new):
                return f"blocks.{i}.{old}{rest[len(new) :]}"
    raise KeyError(key)


def convert_diffsynth_state_dict(state: dict[str, torch.Tensor], model: nn.Module, source: str) -> dict:
    """DiffSynth-named DiT weights renamed for ``model``; strict: a one-line ``ValueError`` naming the first
    unknown, missing or mis-shaped key. An optional ``model.`` prefix (as DiffSynth accepts) is dropped."""
    if state and all(k.startswith("model.") for k in state):
        state = {k[len("model.") :]: v for k, v in state.items()}
    if any(k.startswith("text_embedding.") for k in state):
        raise ValueError(
            f"{source}: has text_embedding.* keys: this is the base Wan2.2-TI2V-5B DiT, not RLinf's action-conditioned "
            "world model (expected action_mlp1.* / action_mlp2.* and no text embedding)"
        )
    expected = model.state_dict()
    out = {}
    for key, value in state.items():
        try:
            new = diffsynth_to_diffusers_key(key)
        except KeyError:
            raise ValueError(
                f"{source}: unexpected key {key!r} for the action-conditioned Wan DiT (DiffSynth WanModel names, e.g. "
                "'blocks.0.self_attn.q.weight', 'action_mlp1.0.weight')"
            ) from None
        if new not in expected:
            raise ValueError(f"{source}: key {key!r} has no place in a {len(model.blocks)}-layer Wan DiT")
        if tuple(value.shape) != tuple(expected[new].shape):
            raise ValueError(
                f"{source}: {key!r} has shape {list(value.shape)}, the configured DiT expects "
                f"{list(expected[new].shape)} (wrong wan_config.json?)"
            )
        out[new] = value
    missing = [diffusers_to_diffsynth_key(k) for k in expected if k not in out]
    if missing:
        raise ValueError(f"{source}: missing {len(missing)} DiT key(s), e.g. {missing[0]!r}")
    return out
