"""Numeric parity of our timm-layout vision towers with implementations we did not write.

transformers' ``Dinov2WithRegistersModel`` and ``SiglipVisionModel`` compute what timm 0.9.10's
``vit_large_patch14_reg4_dinov2`` and ``vit_so400m_patch14_siglip_224`` compute (the versions OpenVLA was trained and
is run with). Random tiny transformers models are converted to timm's names through a key map and loaded into our
``TimmViT``; the tower's features (the second-to-last layer's patch tokens, as Prismatic reads them) must agree to
float precision. The towers keep their presets' activation (only the sizes shrink), so a wrong activation fails here.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlinf_core.testing.numerics import reorder_rtol
from rlinf_policy_openvla.vit import TIMM_PRESETS, TimmViT, ViTSpec

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

DINO_ID, SIGLIP_ID = "vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"
SIZES = {"image_size": 42, "patch_size": 14, "width": 48, "depth": 3, "heads": 4}


def _tiny(preset: str, **extra) -> ViTSpec:
    base = TIMM_PRESETS[preset]
    return dataclasses.replace(base, mlp_dim=4 * SIZES["width"], **SIZES, **extra)


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random (LayerNorm and LayerScale included, so none is an identity)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)


def dinov2_to_timm(hf: dict[str, torch.Tensor], depth: int) -> dict[str, torch.Tensor]:
    """transformers' Dinov2WithRegisters names → timm's (Prismatic's) names.

    timm's reg4 DINOv2 keeps position embeddings for the patches only (``no_embed_class``); transformers adds a
    class position to the class token before the registers are inserted, which is the same as folding it into
    ``cls_token``.
    """
    out = {
        "patch_embed.proj.weight": hf["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": hf["embeddings.patch_embeddings.projection.bias"],
        "cls_token": hf["embeddings.cls_token"] + hf["embeddings.position_embeddings"][:, :1],
        "reg_token": hf["embeddings.register_tokens"],
        "pos_embed": hf["embeddings.position_embeddings"][:, 1:],
        "norm.weight": hf["layernorm.weight"],
        "norm.bias": hf["layernorm.bias"],
    }
    for i in range(depth):
        a, b = f"encoder.layer.{i}", f"blocks.{i}"
        for w in ("weight", "bias"):
            out[f"{b}.norm1.{w}"] = hf[f"{a}.norm1.{w}"]
            out[f"{b}.norm2.{w}"] = hf[f"{a}.norm2.{w}"]
            q, k, v = (hf[f"{a}.attention.{n}_proj.{w}"] for n in "qkv")
            out[f"{b}.attn.qkv.{w}"] = torch.cat([q, k, v], dim=0)
            out[f"{b}.attn.proj.{w}"] = hf[f"{a}.attention.o_proj.{w}"]
            out[f"{b}.mlp.fc1.{w}"] = hf[f"{a}.mlp.fc1.{w}"]
            out[f"{b}.mlp.fc2.{w}"] = hf[f"{a}.mlp.fc2.{w}"]
        out[f"{b}.ls1.scale_factor"] = hf[f"{a}.layer_scale1.lambda1"]
        out[f"{b}.ls2.scale_factor"] = hf[f"{a}.layer_scale2.lambda1"]
    return out


def siglip_to_timm(hf: dict[str, torch.Tensor], depth: int, width: int) -> dict[str, torch.Tensor]:
    """transformers' SiglipVisionModel names (``vision_model.`` stripped) → timm's names, MAP head included."""
    out = {
        "patch_embed.proj.weight": hf["embeddings.patch_embedding.weight"],
        "patch_embed.proj.bias": hf["embeddings.patch_embedding.bias"],
        "pos_embed": hf["embeddings.position_embedding.weight"].unsqueeze(0),
        "norm.weight": hf["post_layernorm.weight"],
        "norm.bias": hf["post_layernorm.bias"],
        "attn_pool.latent": hf["head.probe"],
        "attn_pool.q.weight": hf["head.attention.in_proj_weight"][:width],
        "attn_pool.q.bias": hf["head.attention.in_proj_bias"][:width],
        "attn_pool.kv.weight": hf["head.attention.in_proj_weight"][width:],
        "attn_pool.kv.bias": hf["head.attention.in_proj_bias"][width:],
        "attn_pool.proj.weight": hf["head.attention.out_proj.weight"],
        "attn_pool.proj.bias": hf["head.attention.out_proj.bias"],
    }
    for w in ("weight", "bias"):
        out[f"attn_pool.norm.{w}"] = hf[f"head.layernorm.{w}"]
        out[f"attn_pool.mlp.fc1.{w}"] = hf[f"head.mlp.fc1.{w}"]
        out[f"attn_pool.mlp.fc2.{w}"] = hf[f"head.mlp.fc2.{w}"]
    for i in range(depth):
        a, b = f"encoder.layers.{i}", f"blocks.{i}"
        for w in ("weight", "bias"):
            out[f"{b}.norm1.{w}"] = hf[f"{a}.layer_norm1.{w}"]
            out[f"{b}.norm2.{w}"] = hf[f"{a}.layer_norm2.{w}"]
            q, k, v = (hf[f"{a}.self_attn.{n}_proj.{w}"] for n in "qkv")
            out[f"{b}.attn.qkv.{w}"] = torch.cat([q, k, v], dim=0)
            out[f"{b}.attn.proj.{w}"] = hf[f"{a}.self_attn.out_proj.{w}"]
            out[f"{b}.mlp.fc1.{w}"] = hf[f"{a}.mlp.fc1.{w}"]
            out[f"{b}.mlp.fc2.{w}"] = hf[f"{a}.mlp.fc2.{w}"]
    return out


def _pixels(dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(2, 3, SIZES["image_size"], SIZES["image_size"], generator=gen).to(dtype)


# The same maths in other operations: reordered sums, relative to the output's size (rlinf_core.testing.numerics).
# The longest sum has 588 terms (a 14 x 14 x 3 patch); the longest path ~31 sums (3 blocks of ~9, embedding, pool).
TOL = {dtype: reorder_rtol(14 * 14 * 3, 31, dtype=dtype) for dtype in (torch.float64, torch.float32)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_dinov2_tower_matches_transformers_dinov2_with_registers(dtype):
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    spec = _tiny(DINO_ID)
    config = Dinov2WithRegistersConfig(
        hidden_size=spec.width,
        num_hidden_layers=spec.depth,
        num_attention_heads=spec.heads,
        mlp_ratio=spec.mlp_dim // spec.width,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        num_register_tokens=spec.num_reg_tokens,
        layer_norm_eps=spec.eps,
        hidden_act="gelu",
        attn_implementation="sdpa",
    )
    hf = Dinov2WithRegistersModel(config).eval()
    _randomise(hf, seed=1)
    hf.to(dtype)
    ours = TimmViT(spec).to(dtype).eval()
    ours.load_state_dict(dinov2_to_timm(hf.state_dict(), spec.depth), strict=True)

    x = _pixels(dtype)
    with torch.no_grad():
        ref = hf(pixel_values=x, output_hidden_states=True).hidden_states[-2][:, spec.num_prefix :]
        got = ours(x)
    assert got.shape == ref.shape == (2, spec.num_patches, spec.width)
    torch.testing.assert_close(got, ref, atol=TOL[dtype] * ref.abs().max().item(), rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_siglip_tower_matches_transformers_siglip_with_timm_0_9_10_exact_gelu(dtype):
    """timm 0.9.10's so400m SigLIP (what OpenVLA runs) uses exact GELU: transformers with ``hidden_act="gelu"``."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    spec = _tiny(SIGLIP_ID)
    config = SiglipVisionConfig(
        hidden_size=spec.width,
        intermediate_size=spec.mlp_dim,
        num_hidden_layers=spec.depth,
        num_attention_heads=spec.heads,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        layer_norm_eps=spec.eps,
        hidden_act="gelu",
        attn_implementation="sdpa",
    )
    hf = SiglipVisionModel(config).eval()
    _randomise(hf, seed=2)
    hf.to(dtype)
    state = {k.removeprefix("vision_model."): v for k, v in hf.state_dict().items()}
    ours = TimmViT(spec).to(dtype).eval()
    ours.load_state_dict(siglip_to_timm(state, spec.depth, spec.width), strict=True)

    x = _pixels(dtype)
    with torch.no_grad():
        out = hf(pixel_values=x, output_hidden_states=True)
        ref = out.hidden_states[-2]
        got = ours(x)
        # the MAP head (unused by Prismatic, kept for strict loading) on the final normed tokens
        tokens = ours.patch_embed(x) + ours.pos_embed
        for block in ours.blocks:
            tokens = block(tokens)
        pooled = ours.attn_pool(ours.norm(tokens))
    assert got.shape == ref.shape == (2, spec.num_patches, spec.width)
    torch.testing.assert_close(got, ref, atol=TOL[dtype] * ref.abs().max().item(), rtol=0)
    torch.testing.assert_close(
        pooled, out.pooler_output, atol=TOL[dtype] * out.pooler_output.abs().max().item(), rtol=0
    )


def test_tanh_gelu_siglip_would_not_match():
    """The check above can tell the two activations apart at this size (guards against a vacuous tolerance)."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    spec = _tiny(SIGLIP_ID, act="gelu_tanh")
    config = SiglipVisionConfig(
        hidden_size=spec.width,
        intermediate_size=spec.mlp_dim,
        num_hidden_layers=spec.depth,
        num_attention_heads=spec.heads,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        hidden_act="gelu",
    )
    hf = SiglipVisionModel(config).eval().double()
    _randomise(hf, seed=2)
    state = {k.removeprefix("vision_model."): v for k, v in hf.state_dict().items()}
    ours = TimmViT(spec).eval().double()
    ours.load_state_dict(siglip_to_timm(state, spec.depth, spec.width), strict=True)
    x = _pixels(torch.float64)
    with torch.no_grad():
        diff = (ours(x) - hf(pixel_values=x, output_hidden_states=True).hidden_states[-2]).abs().max()
    assert diff > 1e-6


def test_presets_and_make_tiny_use_timm_0_9_10_activations(tmp_path):
    from rlinf_policy_openvla.checkpoint import read_spec
    from rlinf_policy_openvla.make_tiny import make_tiny

    assert TIMM_PRESETS[SIGLIP_ID].act == "gelu"
    assert TIMM_PRESETS["vit_so400m_patch14_siglip_384"].act == "gelu"
    assert TIMM_PRESETS[DINO_ID].act == "gelu"
    spec = read_spec(make_tiny(tmp_path / "tiny", num_shards=1))
    assert [v.act for v in spec.vision] == ["gelu", "gelu"]


def test_timm_override_act_layers_is_honoured(tmp_path):
    import json

    from rlinf_core.models.weights import CheckpointError
    from rlinf_policy_openvla.checkpoint import read_spec
    from rlinf_policy_openvla.make_tiny import make_tiny

    path = make_tiny(tmp_path / "tiny", num_shards=1)
    cfg = json.loads((path / "config.json").read_text())
    cfg["timm_override_act_layers"] = [None, "gelu_tanh"]
    (path / "config.json").write_text(json.dumps(cfg))
    assert [v.act for v in read_spec(path).vision] == ["gelu", "gelu_tanh"]
    cfg["timm_override_act_layers"] = ["quick_gelu", None]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="timm_override_act_layers"):
        read_spec(path)
