"""The building blocks of π0 / π0.5 (:mod:`rlinf_policy_openpi._modeling` assembles them): attention masks, the
flow-matching time embedding, joint attention, π0.5's ``AdaRMSNorm``, and the Gemma decoder layer split into q/k/v
and output halves so that two stacks (the VLM and the action expert) attend jointly, layer by layer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlinf_core import require

require("transformers", "pip install 'transformers>=5,<6'", "rlinf-policy-openpi")
from transformers import GemmaConfig  # noqa: E402
from transformers.models.gemma.modeling_gemma import (  # noqa: E402
    GemmaAttention,
    GemmaMLP,
    GemmaRMSNorm,
    GemmaRotaryEmbedding,
    apply_rotary_pos_emb,
)

MASK_VALUE = -2.3819763e38  # openpi's additive "cannot attend" value (finite: fully masked pad rows stay finite)
TIME_MIN_PERIOD, TIME_MAX_PERIOD = 4e-3, 4.0


# ---- pure functions --------------------------------------------------------------------------------------
def make_att_2d_masks(pad_masks: Tensor, ar_masks: Tensor) -> Tensor:
    """big_vision block-causal mask: ``[B, N]`` pad mask + ``[B, N]`` ``ar`` mask → bool ``[B, N, N]``.

    Token q may attend key k when both are valid and ``cumsum(ar)[k] <= cumsum(ar)[q]`` (an ``ar`` of 1 starts
    a block that earlier tokens cannot see).
    """
    cumsum = torch.cumsum(ar_masks.long(), dim=1)
    att = cumsum[:, None, :] <= cumsum[:, :, None]
    return att & (pad_masks[:, None, :] & pad_masks[:, :, None])


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """bool ``[B, Q, K]`` → additive ``[B, 1, Q, K]`` in ``dtype`` (0 where allowed)."""
    low = MASK_VALUE if dtype in (torch.float32, torch.bfloat16, torch.float64) else torch.finfo(dtype).min
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask[:, None], zero, torch.tensor(low, dtype=dtype, device=mask.device))


def sinusoidal_time_embedding(
    t: Tensor, dim: int, min_period: float = TIME_MIN_PERIOD, max_period: float = TIME_MAX_PERIOD
) -> Tensor:
    """``[B]`` flow times → ``[B, dim]`` ``[sin, cos]`` features with periods ``min_period … max_period``
    (computed in float64, returned in ``t``'s dtype)."""
    if dim % 2:
        raise ValueError(f"time embedding width must be even, got {dim}")
    if t.ndim != 1:
        raise ValueError(f"flow time must have shape [B], got {tuple(t.shape)}")
    dtype = torch.float64 if t.device.type != "mps" else torch.float32
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=dtype, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = (2 * math.pi / period)[None, :] * t.to(dtype)[:, None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).to(t.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scaling: float) -> Tensor:
    """Grouped-query attention: q ``[B, H, S, D]``, k / v ``[B, KVH, T, D]``, additive mask ``[B, 1, S, T]``
    → ``[B, S, H·D]``.

    Short queries (the suffix: S < 2·D) fold the G = H / KVH heads sharing a key / value head into the query
    axis (``[B, KVH, G·S, D]``) instead of copying keys and values G times: same result, ~10x faster for the
    suffix over a 800-token prefix on CPU; long queries (the prefix) repeat k / v, which moves less memory.
    """
    if mask.dtype != q.dtype:  # e.g. fp16 compute: -2.38e38 would become -inf and fully masked pad rows NaN
        mask = mask.clamp(min=torch.finfo(q.dtype).min).to(q.dtype)
    bsz, heads, slen, dim = q.shape
    kv_heads, tlen = k.shape[1], k.shape[2]
    group = heads // kv_heads
    if group > 1 and slen < 2 * dim:
        qf = q.reshape(bsz, kv_heads, group * slen, dim)
        mf = mask.expand(bsz, heads, slen, tlen).reshape(bsz, kv_heads, group * slen, tlen)
        out = F.scaled_dot_product_attention(qf, k, v, attn_mask=mf, scale=scaling).reshape(bsz, heads, slen, dim)
    else:
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2).reshape(bsz, slen, heads * dim)


def gated_residual(x: Tensor, y: Tensor, gate: Tensor | None) -> Tensor:
    """``x + y`` (plain norms) or ``x + gate·y`` (adaRMS)."""
    return x + y if gate is None else x + y * gate


# ---- layers ------------------------------------------------------------------------------------------
class AdaRMSNorm(nn.Module):
    """π0.5 adaptive RMSNorm: ``(scale, shift, gate) = dense(cond)``, ``x̂(1 + scale) + shift``; no ``weight``.

    Args:
        dim: normalised width.
        cond_dim: width of the conditioning vector (the expert width in openpi).
        eps: RMS epsilon.
    """

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        nn.init.zeros_(self.dense.weight)  # openpi: the modulation starts at the bias

    def forward(self, x: Tensor, cond: Tensor) -> tuple[Tensor, Tensor]:
        """x ``[B, S, dim]``, cond ``[B, cond_dim]`` → (normalised ``[B, S, dim]``, gate ``[B, 1, dim]``)."""
        dtype = x.dtype
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        modulation = self.dense(cond.to(self.dense.weight.dtype))[:, None, :]
        scale, shift, gate = torch.chunk(modulation, 3, dim=-1)
        normed = normed * (1 + scale.float()) + shift.float()
        return normed.to(dtype), gate.to(dtype)


def apply_norm(norm: nn.Module, x: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """(normalised x, residual gate or None) for a ``GemmaRMSNorm`` or an :class:`AdaRMSNorm`."""
    if isinstance(norm, AdaRMSNorm):
        if cond is None:
            raise ValueError("adaRMS norms need the time conditioning (π0.5); got cond=None")
        return norm(x, cond)
    return norm(x), None


def gemma_config(
    width: int, depth: int, mlp_dim: int, num_heads: int, num_kv_heads: int, head_dim: int, vocab_size: int
) -> GemmaConfig:
    return GemmaConfig(
        hidden_size=width,
        num_hidden_layers=depth,
        intermediate_size=mlp_dim,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        vocab_size=vocab_size,
        hidden_act="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        pad_token_id=0,
    )


class OpenPIDecoderLayer(nn.Module):
    """A Gemma decoder layer that can also run in two halves around a joint attention.

    Keys: ``input_layernorm``, ``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm``,
    ``mlp.{gate,up,down}_proj`` (adaRMS norms: ``*_layernorm.dense.*``). Every use of the parameters goes through
    :meth:`forward` (so FSDP2 units gather them): ``mode="layer"`` is the whole layer, ``"qkv"`` / ``"out"`` the
    halves before / after attention (the joint pass concatenates the two stacks' q / k / v in between).
    """

    def __init__(self, config: GemmaConfig, layer_idx: int, adarms_cond_dim: int | None = None) -> None:
        super().__init__()
        self.self_attn = GemmaAttention(config, layer_idx)
        self.mlp = GemmaMLP(config)
        width = config.hidden_size
        if adarms_cond_dim is None:
            self.input_layernorm = GemmaRMSNorm(width, eps=config.rms_norm_eps)
            self.post_attention_layernorm = GemmaRMSNorm(width, eps=config.rms_norm_eps)
        else:
            self.input_layernorm = AdaRMSNorm(width, adarms_cond_dim, eps=config.rms_norm_eps)
            self.post_attention_layernorm = AdaRMSNorm(width, adarms_cond_dim, eps=config.rms_norm_eps)

    def forward(
        self,
        h: Tensor,
        cond: Tensor | None,
        rope: tuple[Tensor, Tensor] | None = None,
        mask: Tensor | None = None,
        past: tuple[Tensor, Tensor] | None = None,
        *,
        mode: str = "layer",
        attn_out: Tensor | None = None,
        gate: Tensor | None = None,
    ):
        """Args:
        h: ``[B, S, W]`` hidden states of this stack's tokens.
        cond: ``[B, W_cond]`` adaRMS condition (π0.5 expert) or None.
        rope: ``(cos, sin)`` ``[B, S, D]`` of the tokens' positions (modes ``layer`` / ``qkv``).
        mask: additive ``[B, 1, S, T]`` over ``past`` + own tokens (mode ``layer``).
        past: cached ``(keys, values)`` ``[B, KVH, T - S, D]`` attended before the own tokens (mode ``layer``).
        mode: ``layer`` → ``(h_out, k, v)`` with this segment's post-RoPE k / v ``[B, KVH, S, D]``;
            ``qkv`` → ``(q, k, v, gate)`` post-RoPE; ``out`` (with ``attn_out`` ``[B, S, H·D]`` and ``gate``)
            → ``h_out``.
        """
        if mode == "out":
            return self._out(h, attn_out, gate, cond)
        x, gate = apply_norm(self.input_layernorm, h, cond)
        attn = self.self_attn
        shape = (*x.shape[:-1], -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        cos, sin = rope
        q, k = apply_rotary_pos_emb(q, k, cos.to(q.dtype), sin.to(q.dtype))
        if mode == "qkv":
            return q, k, v, gate
        if mode != "layer":
            raise ValueError(f"mode must be layer / qkv / out, got {mode!r}")
        keys, values = k, v
        if past is not None:
            keys = torch.cat([past[0].to(k.dtype), k], dim=2)
            values = torch.cat([past[1].to(v.dtype), v], dim=2)
        return self._out(h, attention(q, keys, values, mask, attn.scaling), gate, cond), k, v

    def _out(self, h: Tensor, attn_out: Tensor, gate: Tensor | None, cond: Tensor | None) -> Tensor:
        """Output projection, gated residual, MLP, gated residual: ``[B, S, W]``."""
        o_proj = self.self_attn.o_proj
        h = gated_residual(h, o_proj(attn_out.to(o_proj.weight.dtype)), gate)
        x, gate = apply_norm(self.post_attention_layernorm, h, cond)
        return gated_residual(h, self.mlp(x.to(self.mlp.up_proj.weight.dtype)), gate)


class GemmaStack(nn.Module):
    """Decoder layers + final norm (+ ``embed_tokens`` and the shared rotary embedding for the VLM)."""

    def __init__(self, config: GemmaConfig, *, embed: bool, adarms_cond_dim: int | None = None) -> None:
        super().__init__()
        if embed:  # plain embedding: the √width scaling is applied once, in OpenPIModel.embed_language
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
            self.rotary_emb = GemmaRotaryEmbedding(config)
        self.layers = nn.ModuleList(
            OpenPIDecoderLayer(config, i, adarms_cond_dim) for i in range(config.num_hidden_layers)
        )
        self.norm = (
            GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            if adarms_cond_dim is None
            else AdaRMSNorm(config.hidden_size, adarms_cond_dim, eps=config.rms_norm_eps)
        )

    @property
    def dtype(self) -> torch.dtype:
        return self.layers[0].self_attn.q_proj.weight.dtype


__all__ = [
    "AdaRMSNorm",
    "GemmaStack",
    "MASK_VALUE",
    "OpenPIDecoderLayer",
    "additive_mask",
    "apply_norm",
    "attention",
    "gemma_config",
    "gated_residual",
    "make_att_2d_masks",
    "sinusoidal_time_embedding",
]
