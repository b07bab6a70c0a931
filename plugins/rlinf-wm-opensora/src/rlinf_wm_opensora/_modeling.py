"""STDiT3, the action-conditioned video DiT of RLinf's OpenSora world model, with the released parameter names.

Written from RLinf/opensora ``opensora/models/stdit/stdit3.py`` and ``opensora/models/layers/blocks.py`` (read
for facts, not copied). Shapes: ``B`` batch, ``C`` latent channels, ``T`` latent frames (condition + generated),
``H×W`` latent size, ``S = (H/2)(W/2)`` tokens per frame, ``D`` hidden size.

- Each of the ``depth`` layers is a spatial block (attention over the ``S`` tokens of a frame) followed by a
  temporal block (causal attention over the ``T`` frames of a token position, interleaved RoPE).
- The timestep embedding plus one action embedding per frame modulates the spatial blocks; the temporal blocks and
  the final layer see the timestep alone. Condition frames (``x_mask`` False) are modulated with timestep 15 and
  no action, in every block and in the final layer.
- ``y_embedder``, ``fps_embedder`` and each block's ``cross_attn`` are in the checkpoint but the forward never
  runs them (the text pathway of Open-Sora, unused here); they are built so the released keys load.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

#: the timestep condition frames are told (``t0`` upstream): lightly noised, as in training
CONDITION_TIMESTEP = 15.0


@dataclass
class STDiT3Config:
    """The architecture fields of ``config.json`` (others, such as ``enable_flash_attn``, are ignored).

    Args:
        hidden_size: width ``D`` (released: 1152).
        depth: spatial + temporal block pairs (released: 28).
        num_heads: attention heads (released: 16).
        patch_size: (t, h, w) patch of the latent video (released: (1, 2, 2)).
        in_channels: latent channels of the VAE (SDXL: 4).
        pred_sigma: the output has ``2 × in_channels`` channels (velocity first; the rest is unused).
        mlp_ratio: MLP width / ``D``.
        qk_norm: RMSNorm on queries and keys.
        caption_channels: input width of the unused caption embedder.
        model_max_length: rows of the unused caption embedder's null embedding.
        input_sq_size: reference side of the position-embedding scale ``sqrt(H_px W_px) / input_sq_size``.
        action_dim: action size.
        pad_action_num: condition frames, each given the learned ``none_action`` embedding.
        action_tokens: also add each frame's action embedding to that frame's tokens, so that it reaches the
            temporal blocks and the final layer too (upstream: the spatial blocks' modulation only; the Wan world
            model also feeds its actions to the output head). No new weights; False for the released model.
    """

    hidden_size: int = 1152
    depth: int = 28
    num_heads: int = 16
    patch_size: tuple[int, int, int] = (1, 2, 2)
    in_channels: int = 4
    pred_sigma: bool = True
    mlp_ratio: float = 4.0
    qk_norm: bool = True
    caption_channels: int = 4096
    model_max_length: int = 300
    input_sq_size: int = 512
    action_dim: int = 7
    pad_action_num: int = 4
    action_tokens: bool = False

    def __post_init__(self) -> None:
        self.patch_size = tuple(int(p) for p in self.patch_size)
        if len(self.patch_size) != 3:
            raise ValueError(f"STDiT3 patch_size must have 3 entries (t, h, w), got {list(self.patch_size)}")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"STDiT3 hidden_size {self.hidden_size} must split into {self.num_heads} heads of an even size (RoPE)"
            )
        if self.hidden_size % 4:
            raise ValueError(f"STDiT3 hidden_size {self.hidden_size} must be a multiple of 4 (2-D position embedding)")

    @property
    def out_channels(self) -> int:
        return self.in_channels * 2 if self.pred_sigma else self.in_channels

    @classmethod
    def from_json(cls, path: str | Path) -> STDiT3Config:
        """The config of a released ``config.json`` (unknown keys, e.g. Hugging Face metadata, are ignored)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no STDiT3 config at {path}: a world-model directory has config.json")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def to_json(self, path: str | Path, **extra) -> None:
        data = {"model_type": "STDiT3", **asdict(self), **extra}
        data["patch_size"] = list(self.patch_size)
        Path(path).write_text(json.dumps(data, indent=2) + "\n")


class LlamaRMSNorm(nn.Module):
    """RMSNorm computed in fp32, weight applied in the input dtype (q/k norm of every attention)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Mlp(nn.Module):
    """timm's ``Mlp`` names (``fc1``, ``fc2``) with tanh-approximated GELU."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden_features, out_features or in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class RotaryEmbedding(nn.Module):
    """Interleaved rotary embedding over the sequence axis (``rotary_embedding_torch`` defaults: theta 10000).

    ``freqs`` is a (frozen) parameter because the released checkpoint stores it as ``rope.freqs``.
    """

    def __init__(self, dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        freqs = 1.0 / theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim)
        self.freqs = nn.Parameter(freqs, requires_grad=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., N, d]`` rotated by position ``0..N-1`` along ``N``."""
        n = x.shape[-2]
        angles = torch.arange(n, device=x.device, dtype=self.freqs.dtype)[:, None] * self.freqs[None]
        angles = angles.repeat_interleave(2, dim=-1)  # [N, d]: (f0, f0, f1, f1, ...)
        pairs = x.unflatten(-1, (-1, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return (x * angles.cos().to(x.dtype) + rotated * angles.sin().to(x.dtype)).to(x.dtype)


class Attention(nn.Module):
    """Self-attention with a fused qkv (bias), per-head q/k RMSNorm, optional RoPE and a causal mask."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool, causal: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.causal = causal
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.q_norm = LlamaRMSNorm(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = LlamaRMSNorm(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, rope: RotaryEmbedding | None = None) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = rope.rotate(q), rope.rotate(k)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


class MultiHeadCrossAttention(nn.Module):
    """Open-Sora's text cross-attention: in the checkpoint, never run by this world model."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q_linear = nn.Linear(dim, dim)
        self.kv_linear = nn.Linear(dim, dim * 2)
        self.proj = nn.Linear(dim, dim)


def t2i_modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class STDiT3Block(nn.Module):
    """One spatial or temporal block: adaLN-single modulated attention + MLP."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float, qk_norm: bool, temporal: bool) -> None:
        super().__init__()
        self.temporal = temporal
        self.norm1 = nn.LayerNorm(hidden_size, eps=1e-6, elementwise_affine=False)
        self.attn = Attention(hidden_size, num_heads, qk_norm, causal=temporal)
        self.cross_attn = MultiHeadCrossAttention(hidden_size)
        self.norm2 = nn.LayerNorm(hidden_size, eps=1e-6, elementwise_affine=False)
        self.mlp = Mlp(hidden_size, int(hidden_size * mlp_ratio))
        self.scale_shift_table = nn.Parameter(torch.randn(6, hidden_size) / hidden_size**0.5)

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        x_mask: torch.Tensor | None,
        t0: torch.Tensor | None,
        rope: RotaryEmbedding | None,
    ) -> torch.Tensor:
        """``x [B, T, S, D]``; ``t`` the modulation ``[B, 6D]`` (temporal) or ``[B·T, 6D]`` (spatial);
        ``x_mask [B, T]`` True on generated frames; ``t0 [B, 6D]`` the condition frames' modulation."""
        B, T, S, D = x.shape
        frames = 1 if self.temporal else T
        mod = (t.reshape(B, frames, 6, D) + self.scale_shift_table).unsqueeze(2)  # [B, T|1, 1, 6, D]
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.unbind(3)
        if x_mask is not None:  # condition frames: the t0 modulation
            keep = x_mask[:, :, None, None]
            shift0_msa, scale0_msa, gate0_msa, shift0_mlp, scale0_mlp, gate0_mlp = (
                (t0.reshape(B, 1, 6, D) + self.scale_shift_table).unsqueeze(2).unbind(3)
            )

        h = self.norm1(x)
        m = t2i_modulate(h, shift_msa, scale_msa)
        if x_mask is not None:
            m = torch.where(keep, m, t2i_modulate(h, shift0_msa, scale0_msa))
        if self.temporal:
            a = self.attn(m.permute(0, 2, 1, 3).reshape(B * S, T, D), rope).reshape(B, S, T, D).permute(0, 2, 1, 3)
        else:
            a = self.attn(m.reshape(B * T, S, D)).reshape(B, T, S, D)
        g = gate_msa * a
        if x_mask is not None:
            g = torch.where(keep, g, gate0_msa * a)
        x = x + g

        h = self.norm2(x)
        m = t2i_modulate(h, shift_mlp, scale_mlp)
        if x_mask is not None:
            m = torch.where(keep, m, t2i_modulate(h, shift0_mlp, scale0_mlp))
        a = self.mlp(m)
        g = gate_mlp * a
        if x_mask is not None:
            g = torch.where(keep, g, gate0_mlp * a)
        return x + g


class PatchEmbed3D(nn.Module):
    def __init__(self, patch_size: tuple[int, int, int], in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv3d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, T, H, W]`` → ``[B, T', H'·W', D]``."""
        x = self.proj(x)
        return x.flatten(3).permute(0, 2, 3, 1)


class TimestepEmbedder(nn.Module):
    """Sinusoidal ``[cos, sin]`` features (256, max period 10000) → Linear → SiLU → Linear."""

    def __init__(self, hidden_size: int, frequency_embedding_size: int = 256) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size), nn.SiLU(), nn.Linear(hidden_size, hidden_size)
        )
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
        """``t [N]`` (fractional allowed) → ``[N, dim]`` fp32."""
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t[:, None].float() * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1) if dim % 2 else emb

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size).to(dtype))


class SizeEmbedder(TimestepEmbedder):
    """Open-Sora's fps embedder: in the checkpoint, unused (upstream's forward comments it out)."""


class CaptionEmbedder(nn.Module):
    """Open-Sora's T5 caption projection: in the checkpoint (``y_proj``, ``y_embedding``), unused."""

    def __init__(self, in_channels: int, hidden_size: int, token_num: int) -> None:
        super().__init__()
        self.y_proj = Mlp(in_channels, hidden_size, hidden_size)
        self.register_buffer("y_embedding", torch.randn(token_num, in_channels) / in_channels**0.5)


class ActionEncoder(nn.Module):
    """Per-frame action embeddings: ``pad_action_num`` copies of the learned ``none_action`` (condition frames),
    then ``fc(action)`` for each generated frame."""

    def __init__(self, hidden_size: int, action_dim: int, pad_action_num: int) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(action_dim, hidden_size * 4), nn.SiLU(), nn.Linear(hidden_size * 4, hidden_size)
        )
        self.none_action = nn.Embedding(1, hidden_size)
        self.pad_action_num = pad_action_num

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        """``[B, N, A]`` normalised actions → ``[B·(pad + N), D]``."""
        B = actions.shape[0]
        out = self.fc(actions)
        pad = self.none_action.weight[None].expand(B, self.pad_action_num, -1).to(out.dtype)
        return torch.cat([pad, out], dim=1).flatten(0, 1)


class PositionEmbedding2D(nn.Module):
    """Sin-cos embedding of the token grid, scaled: positions ``i / scale · base_size / n``.

    As upstream, the first half encodes the column and the second half the row of a token (row-major order).
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        half = dim // 2
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, half, 2).float() / half)), persistent=False)

    def _sincos(self, pos: torch.Tensor) -> torch.Tensor:
        out = pos[:, None] * self.inv_freq[None]
        return torch.cat([out.sin(), out.cos()], dim=-1)

    def forward(self, h: int, w: int, scale: float, base_size: int, dtype: torch.dtype) -> torch.Tensor:
        """``[1, h·w, D]``."""
        device = self.inv_freq.device
        rows = torch.arange(h, device=device, dtype=torch.float32) / scale * (base_size / h)
        cols = torch.arange(w, device=device, dtype=torch.float32) / scale * (base_size / w)
        grid_r = rows[:, None].expand(h, w).reshape(-1)
        grid_c = cols[None, :].expand(h, w).reshape(-1)
        return torch.cat([self._sincos(grid_c), self._sincos(grid_r)], dim=-1)[None].to(dtype)


class T2IFinalLayer(nn.Module):
    """LayerNorm (no affine) + shift/scale from the timestep + Linear to ``patch · out_channels``."""

    def __init__(self, hidden_size: int, num_patch: int, out_channels: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, eps=1e-6, elementwise_affine=False)
        self.linear = nn.Linear(hidden_size, num_patch * out_channels)
        self.scale_shift_table = nn.Parameter(torch.randn(2, hidden_size) / hidden_size**0.5)

    def forward(self, x: torch.Tensor, t: torch.Tensor, x_mask: torch.Tensor | None, t0: torch.Tensor | None):
        """``x [B, T, S, D]``, ``t``/``t0`` ``[B, D]`` → ``[B, T, S, patch · out]``."""
        h = self.norm_final(x)
        shift, scale = (self.scale_shift_table[None] + t[:, None])[:, None, None].unbind(3)
        out = t2i_modulate(h, shift, scale)
        if x_mask is not None:
            # as upstream (blocks.py T2IFinalLayer.forward): the condition frames' branch normalises the already
            # modulated output again, not x. Only condition-frame outputs differ, which sampling and the loss drop.
            shift0, scale0 = (self.scale_shift_table[None] + t0[:, None])[:, None, None].unbind(3)
            out = torch.where(x_mask[:, :, None, None], out, t2i_modulate(self.norm_final(out), shift0, scale0))
        return self.linear(out)


class STDiT3(nn.Module):
    """The STDiT3 network (``STDiT3-XL/2`` at the released size). See the module docstring.

    Args:
        config: the architecture.
    """

    def __init__(self, config: STDiT3Config) -> None:
        super().__init__()
        self.config = config
        D = config.hidden_size
        self.pos_embed = PositionEmbedding2D(D)
        self.rope = RotaryEmbedding(D // config.num_heads)
        self.x_embedder = PatchEmbed3D(config.patch_size, config.in_channels, D)
        self.t_embedder = TimestepEmbedder(D)
        self.action_embedder = ActionEncoder(D, config.action_dim, config.pad_action_num)
        self.fps_embedder = SizeEmbedder(D)
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D))
        self.y_embedder = CaptionEmbedder(config.caption_channels, D, config.model_max_length)
        blocks = dict(hidden_size=D, num_heads=config.num_heads, mlp_ratio=config.mlp_ratio, qk_norm=config.qk_norm)
        self.spatial_blocks = nn.ModuleList(STDiT3Block(**blocks, temporal=False) for _ in range(config.depth))
        self.temporal_blocks = nn.ModuleList(STDiT3Block(**blocks, temporal=True) for _ in range(config.depth))
        self.final_layer = T2IFinalLayer(D, math.prod(config.patch_size), config.out_channels)
        self.gradient_checkpointing = False
        self._init_weights()
        for name, p in self.named_parameters():  # never in the forward: no gradients, no optimizer state
            if is_optional_key(name):
                p.requires_grad_(False)

    def _init_weights(self) -> None:
        """Upstream's initialisation (xavier Linear, zero temporal output projections); loads overwrite it."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        for block in self.temporal_blocks:
            nn.init.zeros_(block.attn.proj.weight)
            nn.init.zeros_(block.cross_attn.proj.weight)
            nn.init.zeros_(block.mlp.fc2.weight)

    def forward(
        self,
        x: torch.Tensor,
        timestep: torch.Tensor,
        actions: torch.Tensor,
        x_mask: torch.Tensor | None = None,
        height: float = 256.0,
        width: float = 256.0,
    ) -> torch.Tensor:
        """Predicted velocity and (unused) sigma.

        Args:
            x: latents ``[B, C, T, H, W]`` (``T = pad_action_num + N``).
            timestep: ``[B]`` in ``[0, 1000]`` (1000 = pure noise).
            actions: normalised actions ``[B, N, A]`` of the generated frames.
            x_mask: ``[B, T]`` bool, True on generated frames (False frames get the condition timestep).
            height: frame height in pixels (position-embedding scale).
            width: frame width in pixels.

        Returns:
            ``[B, out_channels, T, H, W]`` float32; channels ``[:in_channels]`` are the velocity ``x0 - noise``.
        """
        cfg = self.config
        dtype = self.x_embedder.proj.weight.dtype
        B, _, Tx, Hx, Wx = x.shape
        pt, ph, pw = cfg.patch_size
        if Tx % pt or Hx % ph or Wx % pw:
            raise ValueError(f"latent video {list(x.shape)} is not a multiple of the patch size {list(cfg.patch_size)}")
        T, H, W = Tx // pt, Hx // ph, Wx // pw
        if actions.shape[1] + cfg.pad_action_num != T:
            raise ValueError(f"{actions.shape[1]} actions + {cfg.pad_action_num} condition frames != {T} latent frames")
        S = H * W
        x, timestep = x.to(dtype), timestep.to(dtype)  # as upstream: timesteps rounded to the weights' dtype
        scale = math.sqrt(height * width) / cfg.input_sq_size
        pos = self.pos_embed(H, W, scale=scale, base_size=round(S**0.5), dtype=dtype)

        t = self.t_embedder(timestep, dtype)  # [B, D]
        action_emb = self.action_embedder(actions.to(dtype))  # [B·T, D]
        t_spatial = self.t_block(t.repeat_interleave(T, dim=0) + action_emb)  # [B·T, 6D]
        t_temporal = self.t_block(t)
        t0 = t0_mod = None
        if x_mask is not None:
            t0 = self.t_embedder(torch.full_like(timestep, CONDITION_TIMESTEP), dtype)
            t0_mod = self.t_block(t0)

        h = self.x_embedder(x) + pos[:, None]  # [B, T, S, D]
        if cfg.action_tokens:
            h = h + action_emb.reshape(B, T, 1, -1)
        for spatial, temporal in zip(self.spatial_blocks, self.temporal_blocks):
            for block, mod, rope in ((spatial, t_spatial, None), (temporal, t_temporal, self.rope)):
                if self.gradient_checkpointing and torch.is_grad_enabled():
                    h = checkpoint(block, h, mod, x_mask, t0_mod, rope, use_reentrant=False)
                else:
                    h = block(h, mod, x_mask, t0_mod, rope)
        h = self.final_layer(h, t, x_mask, t0)  # [B, T, S, pt·ph·pw·C_out]
        h = h.reshape(B, T, H, W, pt, ph, pw, cfg.out_channels)
        h = h.permute(0, 7, 1, 4, 2, 5, 3, 6).reshape(B, cfg.out_channels, T * pt, H * ph, W * pw)
        return h.float()


#: checkpoint keys of modules the forward never runs (text pathway) or that are derived (RoPE frequencies):
#: loaded when present, not required. Every other key is strict.
OPTIONAL_KEY_PARTS = ("y_embedder.", "fps_embedder.", ".cross_attn.", "rope.freqs")


def is_optional_key(key: str) -> bool:
    return any(part in key for part in OPTIONAL_KEY_PARTS)
