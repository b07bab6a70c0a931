"""Vision transformers in timm's parameter layout (no timm / torchvision needed).

OpenVLA's Prismatic checkpoints store the DINOv2 and SigLIP towers under timm's names
(``patch_embed.proj``, ``cls_token``, ``reg_token``, ``pos_embed``, ``blocks.N.{norm1, attn.qkv,
attn.proj, ls1.scale_factor, norm2, mlp.fc1, mlp.fc2, ls2.scale_factor}``, ``norm``, SigLIP's
``attn_pool.*``), so these modules load real weights without any key conversion. Prismatic reads
the patch tokens after the second-to-last block (prefix tokens dropped, no final norm).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class ViTSpec:
    """Sizes of one timm-layout ViT (everything a checkpoint's shapes depend on)."""

    image_size: int
    patch_size: int
    width: int
    depth: int
    heads: int
    mlp_dim: int
    num_reg_tokens: int = 0
    class_token: bool = True
    layer_scale: bool = False
    act: str = "gelu"  # "gelu" | "gelu_tanh"
    attn_pool: bool = False
    eps: float = 1e-6

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_prefix(self) -> int:
        return int(self.class_token) + self.num_reg_tokens

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ViTSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ViT config keys {unknown}; valid keys: {sorted(known)}")
        return cls(**data)


# Sizes of the timm models named in Prismatic configs (``timm_model_ids``), at 224 px, as timm 0.9.10 builds them:
# the version openvla/openvla and openvla-oft pin (openvla/openvla:pyproject.toml:45 ``timm==0.9.10``), which
# trained and runs the released towers. Its SigLIP entries set no ``act_layer``, so they use VisionTransformer's
# default exact ``nn.GELU``; the tanh approximation only came with later timm releases.
TIMM_PRESETS: dict[str, ViTSpec] = {
    "vit_large_patch14_reg4_dinov2.lvd142m": ViTSpec(
        image_size=224,
        patch_size=14,
        width=1024,
        depth=24,
        heads=16,
        mlp_dim=4096,
        num_reg_tokens=4,
        class_token=True,
        layer_scale=True,
        act="gelu",
    ),
    "vit_so400m_patch14_siglip_224": ViTSpec(
        image_size=224,
        patch_size=14,
        width=1152,
        depth=27,
        heads=16,
        mlp_dim=4304,
        class_token=False,
        act="gelu",
        attn_pool=True,
    ),
    "vit_so400m_patch14_siglip_384": ViTSpec(
        image_size=384,
        patch_size=14,
        width=1152,
        depth=27,
        heads=16,
        mlp_dim=4304,
        class_token=False,
        act="gelu",
        attn_pool=True,
    ),
}
ACTIVATIONS = ("gelu", "gelu_tanh")  # timm's names, as Prismatic's ``timm_override_act_layers`` gives them


def _act(name: str) -> nn.Module:
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    raise ValueError(f"unsupported ViT activation {name!r}; use 'gelu' or 'gelu_tanh'")


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = _act(act)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class LayerScale(nn.Module):
    """timm's LayerScale with ``gamma`` renamed ``scale_factor`` (as in Prismatic checkpoints)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale_factor = nn.Parameter(torch.full((dim,), 1e-5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale_factor


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(spec.width, eps=spec.eps)
        self.attn = Attention(spec.width, spec.heads)
        self.ls1 = LayerScale(spec.width) if spec.layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(spec.width, eps=spec.eps)
        self.mlp = Mlp(spec.width, spec.mlp_dim, spec.act)
        self.ls2 = LayerScale(spec.width) if spec.layer_scale else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class AttentionPoolLatent(nn.Module):
    """SigLIP's MAP head. Present in the checkpoints, unused by Prismatic (kept for strict loading)."""

    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        self.heads = spec.heads
        self.latent = nn.Parameter(torch.zeros(1, 1, spec.width))
        self.q = nn.Linear(spec.width, spec.width)
        self.kv = nn.Linear(spec.width, spec.width * 2)
        self.proj = nn.Linear(spec.width, spec.width)
        self.norm = nn.LayerNorm(spec.width, eps=spec.eps)
        self.mlp = Mlp(spec.width, spec.mlp_dim, spec.act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        hd = C // self.heads
        q = self.q(self.latent.expand(B, -1, -1)).reshape(B, 1, self.heads, hd).transpose(1, 2)
        k, v = self.kv(x).reshape(B, N, 2, self.heads, hd).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, 1, C)
        out = self.proj(out)
        out = out + self.mlp(self.norm(out))
        return out[:, 0]


class PatchEmbed(nn.Module):
    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, spec.width, kernel_size=spec.patch_size, stride=spec.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class TimmViT(nn.Module):
    """A ViT whose ``forward`` returns the second-to-last block's patch tokens ``[B, N, width]``."""

    gradient_checkpointing = False  # recompute each block's activations in the backward (training only)

    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        if spec.depth < 2:
            raise ValueError(f"ViT depth must be >= 2 (features come from the second-to-last block), got {spec.depth}")
        if spec.image_size % spec.patch_size:
            raise ValueError(f"ViT image_size {spec.image_size} is not a multiple of patch_size {spec.patch_size}")
        self.spec = spec
        self.patch_embed = PatchEmbed(spec)
        if spec.class_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, spec.width))
        if spec.num_reg_tokens:
            self.reg_token = nn.Parameter(torch.zeros(1, spec.num_reg_tokens, spec.width))
        # timm's DINOv2-reg and SigLIP models keep position embeddings for patches only.
        self.pos_embed = nn.Parameter(torch.randn(1, spec.num_patches, spec.width) * 0.02)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.depth))
        self.norm = nn.LayerNorm(spec.width, eps=spec.eps)
        if spec.attn_pool:
            self.attn_pool = AttentionPoolLatent(spec)

    def unused_parameter_prefixes(self) -> list[str]:
        """Parameters never touched by :meth:`forward` (last block, final norm, MAP head)."""
        out = [f"blocks.{self.spec.depth - 1}.", "norm."]
        if self.spec.attn_pool:
            out.append("attn_pool.")
        return out

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixels) + self.pos_embed
        prefix = []
        if self.spec.class_token:
            prefix.append(self.cls_token.expand(x.shape[0], -1, -1))
        if self.spec.num_reg_tokens:
            prefix.append(self.reg_token.expand(x.shape[0], -1, -1))
        if prefix:
            x = torch.cat([*prefix, x], dim=1)
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks[: self.spec.depth - 1]:
            # like transformers: checkpoint `forward`, so module hooks (FSDP2 units) stay outside the recompute
            x = checkpoint(block.forward, x, use_reentrant=False) if recompute else block(x)
        return x[:, self.spec.num_prefix :]
