"""π0 / π0.5: PaliGemma (SigLIP + Gemma) prefix and a Gemma action expert attending jointly, layer by layer.

One implementation for both variants; sizes come from :class:`~rlinf_policy_openpi.config.OpenPIConfig`.
Built from transformers 5 modules (``SiglipVisionModel``, ``PaliGemmaMultiModalProjector``, ``GemmaAttention``
projections, ``GemmaMLP``, ``GemmaRMSNorm``, ``GemmaRotaryEmbedding``, ``apply_rotary_pos_emb``); the decoder
layer split into q/k/v and output halves (so two stacks can attend jointly), the π0.5 ``AdaRMSNorm`` and the
flow-matching embeddings are written here.

Module tree = openpi PyTorch checkpoint keys (``PI0Pytorch``, transformers 4.53 names)::

    paligemma_with_expert.paligemma.model.vision_tower.vision_model.{embeddings,encoder,post_layernorm}.*
    paligemma_with_expert.paligemma.model.multi_modal_projector.linear.*
    paligemma_with_expert.paligemma.model.language_model.{embed_tokens,layers.N.*,norm}.*
    paligemma_with_expert.paligemma.lm_head.weight                  (tied to embed_tokens)
    paligemma_with_expert.gemma_expert.model.{layers.N.*,norm}.*      (no embed_tokens)
    action_in_proj, action_out_proj, + π0: state_proj, action_time_mlp_{in,out} | π0.5: time_mlp_{in,out}

Facts kept exactly (openpi ``pi0_pytorch.py`` / ``gemma_pytorch.py``):
- language embeddings are multiplied by √width once (a plain ``nn.Embedding``; transformers 5's
  ``GemmaTextScaledWordEmbedding`` would scale a second time); image features are not scaled;
- attention masks are additive 0 / -2.3819763e38 built from (pad mask, block-causal ``ar`` mask);
- positions are ``cumsum(pad) - 1``: suffix positions start at the number of *valid* prefix tokens;
- π0.5 norms of the expert are ``x̂(1 + scale) + shift`` with ``(scale, shift, gate) = dense(cond)`` and no
  ``weight``; residuals are ``x + gate·y``;
- the unused ``gemma_expert.lm_head`` of released files is not built (the loader drops it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlinf_core import require
from rlinf_policy_openpi.config import EMBED_KEY, OpenPIConfig

require("transformers", "pip install 'transformers>=5,<6'", "rlinf-policy-openpi")
from transformers import SiglipVisionConfig, SiglipVisionModel  # noqa: E402

from rlinf_policy_openpi._gemma_layers import (  # noqa: E402
    GemmaStack,
    OpenPIDecoderLayer,
    additive_mask,
    apply_norm,
    attention,
    gemma_config,
    make_att_2d_masks,
    sinusoidal_time_embedding,
)


class VisionTower(nn.Module):
    """Holds the SigLIP model under ``vision_model`` (the transformers 4.x / openpi key layout)."""

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        self.vision_model = SiglipVisionModel(config)

    def forward(self, pixels: Tensor) -> Tensor:
        return self.vision_model(pixel_values=pixels).last_hidden_state


class _Projector(nn.Module):
    """``PaliGemmaMultiModalProjector``: one linear layer SigLIP width → text width (key ``linear``)."""

    def __init__(self, vision_width: int, text_width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(vision_width, text_width, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)


class _PaliGemmaModel(nn.Module):
    def __init__(self, config: OpenPIConfig) -> None:
        super().__init__()
        vis, vlm = config.vision, config.vlm
        self.vision_tower = VisionTower(
            SiglipVisionConfig(
                hidden_size=vis.width,
                intermediate_size=vis.mlp_dim,
                num_hidden_layers=vis.depth,
                num_attention_heads=vis.num_heads,
                patch_size=vis.patch_size,
                image_size=vis.image_size,
                hidden_act="gelu_pytorch_tanh",
                layer_norm_eps=1e-6,
                vision_use_head=False,
            )
        )
        self.multi_modal_projector = _Projector(vis.width, vlm.width)
        self.language_model = GemmaStack(
            gemma_config(
                vlm.width, vlm.depth, vlm.mlp_dim, vlm.num_heads, vlm.num_kv_heads, vlm.head_dim, config.vocab_size
            ),
            embed=True,
        )


class _PaliGemma(nn.Module):
    def __init__(self, config: OpenPIConfig) -> None:
        super().__init__()
        self.model = _PaliGemmaModel(config)
        self.lm_head = nn.Linear(config.vlm.width, config.vocab_size, bias=False)
        self.lm_head.weight = self.model.language_model.embed_tokens.weight  # tied, as Gemma


class _Expert(nn.Module):
    def __init__(self, config: OpenPIConfig) -> None:
        super().__init__()
        ex = config.expert
        self.model = GemmaStack(
            gemma_config(ex.width, ex.depth, ex.mlp_dim, ex.num_heads, ex.num_kv_heads, ex.head_dim, config.vocab_size),
            embed=False,
            adarms_cond_dim=ex.width if config.pi05 else None,
        )


class PaliGemmaWithExpert(nn.Module):
    def __init__(self, config: OpenPIConfig) -> None:
        super().__init__()
        self.paligemma = _PaliGemma(config)
        self.gemma_expert = _Expert(config)

    @property
    def vlm(self) -> GemmaStack:
        return self.paligemma.model.language_model

    @property
    def expert(self) -> GemmaStack:
        return self.gemma_expert.model


# ---- the model ---------------------------------------------------------------------------------------
@dataclass
class PrefixCache:
    """What the suffix passes need from one prefix pass (images + language), reusable for every denoise step.

    Attributes:
        keys: per VLM layer, post-RoPE keys ``[B, KVH, P, D]``.
        values: per VLM layer, values ``[B, KVH, P, D]``.
        pad_mask: bool ``[B, P]``, True for valid prefix tokens (real cameras, real language tokens).
        valid_len: ``[B]`` number of valid prefix tokens (= the first suffix position).
        prefix_out: ``[B, P, vlm_width]`` final-normed VLM output (the π0.5 "value after VLM" input).
        image_len: the first ``image_len`` prefix positions are camera tokens (slots × tokens per image), the
            rest language tokens.
        state: ``[B, action_dim]`` padded normalised state given to :meth:`OpenPIModel.prefix_cache`, or None.
    """

    keys: list[Tensor]
    values: list[Tensor]
    pad_mask: Tensor
    valid_len: Tensor
    prefix_out: Tensor
    image_len: int = 0
    state: Tensor | None = None

    @property
    def batch_size(self) -> int:
        return self.pad_mask.shape[0]

    def _map(self, fn) -> PrefixCache:
        return replace(
            self,
            keys=[fn(k) for k in self.keys],
            values=[fn(v) for v in self.values],
            pad_mask=fn(self.pad_mask),
            valid_len=fn(self.valid_len),
            prefix_out=fn(self.prefix_out),
            state=None if self.state is None else fn(self.state),
        )

    def repeat_interleave(self, n: int) -> PrefixCache:
        """Each sample repeated ``n`` times along the batch (``[B·n, ...]``, sample-major)."""
        return self._map(lambda t: t.repeat_interleave(n, dim=0))

    def index_select(self, index: Tensor) -> PrefixCache:
        """The samples ``index`` (``[B']`` long) of the batch."""
        return self._map(lambda t: t.index_select(0, index.to(t.device)))

    def detach(self) -> PrefixCache:
        return self._map(lambda t: t.detach())


class OpenPIModel(nn.Module):
    """π0 / π0.5 flow-matching VLA (openpi ``PI0Pytorch`` parameter names, transformers 5 modules).

    Flow convention (openpi): t = 1 is noise, ``x_t = t·ε + (1 - t)·a``, the model predicts the velocity
    ``ε - a``; sampling integrates t: 1 → 0.

    Args:
        config: sizes and variant (see :class:`~rlinf_policy_openpi.config.OpenPIConfig`).
    """

    _no_split_modules = ["OpenPIDecoderLayer", "SiglipEncoderLayer"]  # FSDP2 units (rlinf_core.distributed.strategies)

    def __init__(self, config: OpenPIConfig) -> None:
        super().__init__()
        self.config = config
        width = config.expert_width
        self.paligemma_with_expert = PaliGemmaWithExpert(config)
        self.action_in_proj = nn.Linear(config.action_dim, width)
        self.action_out_proj = nn.Linear(width, config.action_dim)
        if config.pi05:
            self.time_mlp_in = nn.Linear(width, width)
            self.time_mlp_out = nn.Linear(width, width)
        else:
            self.state_proj = nn.Linear(config.action_dim, width)
            self.action_time_mlp_in = nn.Linear(2 * width, width)
            self.action_time_mlp_out = nn.Linear(width, width)
        self.gradient_checkpointing = False
        self.prefix_output_read = False  # True when a head reads the VLM's prefix output (π0.5 critic after the VLM)

    def unused_parameter_prefixes(self) -> tuple[str, ...]:
        """Parameters the forward runs but no gradient reaches (``rlinf_core.models.lora`` puts no adapters there;
        DDP must not wait for them): see :func:`unused_vlm_prefixes`."""
        return unused_vlm_prefixes(self.config.vlm.depth, self.prefix_output_read)

    # ---- embeddings ----
    def embed_images(self, images: list[Tensor]) -> list[Tensor]:
        """Camera slots ``[B, 3, S, S]`` in [-1, 1] → per slot ``[B, N_img, vlm_width]`` (one SigLIP call)."""
        size = self.config.vision.image_size
        for img in images:
            if img.ndim != 4 or tuple(img.shape[1:]) != (3, size, size):
                raise ValueError(
                    f"camera images must be [B, 3, {size}, {size}] in [-1, 1], got {tuple(img.shape)}; "
                    "convert uint8 frames with rlinf_policy_openpi.transforms.camera_slots"
                )
        pg = self.paligemma_with_expert.paligemma.model
        tower = pg.vision_tower.vision_model
        dtype = tower.embeddings.patch_embedding.weight.dtype
        pixels = torch.cat(images, dim=0).to(dtype)
        feats = pg.multi_modal_projector(pg.vision_tower(pixels).to(pg.multi_modal_projector.linear.weight.dtype))
        return list(feats.chunk(len(images), dim=0))

    def embed_language(self, tokens: Tensor) -> Tensor:
        """``[B, L]`` token ids → ``[B, L, vlm_width]`` embeddings × √width (the only place it is scaled)."""
        emb = self.paligemma_with_expert.vlm.embed_tokens(tokens)
        return emb * math.sqrt(emb.shape[-1])

    def embed_prefix(
        self, images: list[Tensor], image_masks: list[Tensor], tokens: Tensor, token_masks: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """→ embeddings ``[B, P, W]``, pad mask bool ``[B, P]``, ``ar`` mask ``[B, P]`` (all 0: bidirectional)."""
        if len(images) != len(image_masks) or not images:
            raise ValueError(
                f"need one mask per camera slot and at least one slot; got {len(images)} images, "
                f"{len(image_masks)} masks"
            )
        if len(images) > self.config.num_images:
            raise ValueError(f"{len(images)} camera slots given; the model has {self.config.num_images}")
        feats = self.embed_images(images)
        bsz = tokens.shape[0]
        pads = [m.to(torch.bool)[:, None].expand(bsz, f.shape[1]) for f, m in zip(feats, image_masks)]
        lang = self.embed_language(tokens)
        dtype = self.paligemma_with_expert.vlm.dtype
        embs = torch.cat([f.to(dtype) for f in feats] + [lang.to(dtype)], dim=1)
        pad = torch.cat(pads + [token_masks.to(torch.bool)], dim=1)
        return embs, pad, torch.zeros_like(pad)

    def embed_suffix(
        self, state: Tensor | None, x_t: Tensor, t: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """state ``[B, A]`` (π0), noisy actions ``[B, H, A]``, time ``[B]`` → embeddings ``[B, S, We]``,
        pad ``[B, S]``, ``ar`` ``[B, S]`` (π0 ``[1, 1, 0…]``, π0.5 ``[1, 0…]``), adaRMS condition ``[B, We]``
        or None."""
        bsz, horizon = x_t.shape[:2]
        width = self.config.expert_width
        time_emb = sinusoidal_time_embedding(t.float(), width)
        actions = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype))
        parts, ar = [], []
        if self.config.pi05:
            w = self.time_mlp_in.weight.dtype
            cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(time_emb.to(w)))))
            tokens = actions
        else:
            if state is None:
                raise ValueError("π0 needs the (normalised, padded) state for its state token; got state=None")
            parts.append(self.state_proj(state.to(self.state_proj.weight.dtype))[:, None, :])
            ar.append(1)
            w = self.action_time_mlp_in.weight.dtype
            mixed = torch.cat([actions.to(w), time_emb.to(w)[:, None, :].expand(bsz, horizon, width)], dim=2)
            tokens = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(mixed)))
            cond = None
        parts.append(tokens)
        ar += [1] + [0] * (horizon - 1)
        embs = torch.cat([p.to(self.paligemma_with_expert.expert.dtype) for p in parts], dim=1)
        pad = torch.ones(bsz, embs.shape[1], dtype=torch.bool, device=embs.device)
        ar_mask = torch.tensor(ar, dtype=torch.long, device=embs.device)[None].expand(bsz, -1)
        return embs, pad, ar_mask, cond

    def _rope(self, h: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return self.paligemma_with_expert.vlm.rotary_emb(h, positions)

    def _checkpointed(self, fn, *args):
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)
        return fn(*args)

    def _layer(self, layer: OpenPIDecoderLayer, *args):
        return self._checkpointed(layer, *args)

    # ---- passes ----
    def prefix_cache(
        self,
        images: list[Tensor],
        image_masks: list[Tensor],
        tokens: Tensor,
        token_masks: Tensor,
        state: Tensor | None = None,
    ) -> PrefixCache:
        """Run the VLM once over images + language and keep every layer's keys / values.

        Args:
            images: 1..num_images camera slots, each ``[B, 3, S, S]`` in [-1, 1] (S = 224 for released models).
            image_masks: per slot bool ``[B]``: False for a missing camera (its tokens become padding).
            tokens: ``[B, L]`` prompt token ids (L = ``max_token_len``).
            token_masks: bool ``[B, L]``, False on padding.
            state: ``[B, action_dim]`` normalised padded state, stored for the suffix passes (π0).
        """
        embs, pad, ar = self.embed_prefix(images, image_masks, tokens, token_masks)
        vlm = self.paligemma_with_expert.vlm
        positions = torch.cumsum(pad.long(), dim=1) - 1
        mask = additive_mask(make_att_2d_masks(pad, ar), embs.dtype)
        rope = self._rope(embs, positions)
        keys, values = [], []
        h = embs
        for layer in vlm.layers:
            h, k, v = self._layer(layer, h, None, rope, mask)
            keys.append(k)
            values.append(v)
        prefix_out, _ = apply_norm(vlm.norm, h, None)
        return PrefixCache(
            keys=keys,
            values=values,
            pad_mask=pad,
            valid_len=pad.long().sum(dim=1),
            prefix_out=prefix_out,
            image_len=pad.shape[1] - tokens.shape[1],
            state=state,
        )

    def suffix_forward(self, cache: PrefixCache, state: Tensor | None, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """One action-expert pass over the cached prefix.

        Args:
            cache: from :meth:`prefix_cache` (same batch size; see :meth:`PrefixCache.repeat_interleave`).
            state: ``[B, action_dim]`` normalised padded state (π0; None: the cache's state; ignored by π0.5).
            x_t: ``[B, H, action_dim]`` noisy actions at time ``t``.
            t: ``[B]`` flow time in [0, 1] (1 = noise).

        Returns:
            velocity ``[B, H, action_dim]`` (float32) and ``suffix_out`` ``[B, H, expert_width]`` (float32,
            final-normed expert output of the H action tokens).
        """
        if x_t.shape[0] != cache.batch_size:
            raise ValueError(
                f"x_t has batch {x_t.shape[0]} but the prefix cache has {cache.batch_size}; "
                "expand the cache with cache.repeat_interleave(n)"
            )
        state = cache.state if state is None else state
        embs, pad, ar, cond = self.embed_suffix(state, x_t, t)
        bsz, slen = pad.shape
        positions = cache.valid_len[:, None] + torch.cumsum(pad.long(), dim=1) - 1
        full = torch.cat([cache.pad_mask[:, None, :].expand(bsz, slen, -1), make_att_2d_masks(pad, ar)], dim=2)
        mask = additive_mask(full, embs.dtype)
        rope = self._rope(embs, positions)
        expert = self.paligemma_with_expert.expert
        h = embs
        for layer, k_prefix, v_prefix in zip(expert.layers, cache.keys, cache.values):
            h, _, _ = self._layer(layer, h, cond, rope, mask, (k_prefix, v_prefix))
        h, _ = apply_norm(expert.norm, h, cond)
        suffix_out = h[:, -self.config.action_horizon :].float()
        velocity = self.action_out_proj(suffix_out.to(self.action_out_proj.weight.dtype)).float()
        return velocity, suffix_out

    def forward(
        self,
        images: list[Tensor],
        image_masks: list[Tensor],
        tokens: Tensor,
        token_masks: Tensor,
        state: Tensor | None,
        x_t: Tensor,
        t: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One joint pass of prefix and suffix (openpi's training path, no cache).

        Returns velocity ``[B, H, action_dim]``, suffix_out ``[B, H, expert_width]`` (float32) and
        prefix_out ``[B, P, vlm_width]``; equal to :meth:`prefix_cache` + :meth:`suffix_forward`.
        """
        p_embs, p_pad, p_ar = self.embed_prefix(images, image_masks, tokens, token_masks)
        s_embs, s_pad, s_ar, cond = self.embed_suffix(state, x_t, t)
        pad = torch.cat([p_pad, s_pad], dim=1)
        positions = torch.cumsum(pad.long(), dim=1) - 1
        mask = additive_mask(make_att_2d_masks(pad, torch.cat([p_ar, s_ar], dim=1)), p_embs.dtype)
        cos, sin = self._rope(p_embs, positions)
        split = p_embs.shape[1]
        rope_p, rope_s = (cos[:, :split], sin[:, :split]), (cos[:, split:], sin[:, split:])
        pwe = self.paligemma_with_expert

        def run(vlm_layer, ex_layer, hp, hs):
            qp, kp, vp, gp = vlm_layer(hp, None, rope_p, mode="qkv")
            qs, ks, vs, gs = ex_layer(hs, cond, rope_s, mode="qkv")
            q = torch.cat([qp, qs.to(qp.dtype)], dim=2)
            k = torch.cat([kp, ks.to(kp.dtype)], dim=2)
            v = torch.cat([vp, vs.to(vp.dtype)], dim=2)
            out = attention(q, k, v, mask, vlm_layer.self_attn.scaling)
            return (
                vlm_layer(hp, None, mode="out", attn_out=out[:, :split], gate=gp),
                ex_layer(hs, cond, mode="out", attn_out=out[:, split:], gate=gs),
            )

        hp, hs = p_embs, s_embs
        for vlm_layer, ex_layer in zip(pwe.vlm.layers, pwe.expert.layers):
            hp, hs = self._checkpointed(run, vlm_layer, ex_layer, hp, hs)
        prefix_out, _ = apply_norm(pwe.vlm.norm, hp, None)
        hs, _ = apply_norm(pwe.expert.norm, hs, cond)
        suffix_out = hs[:, -self.config.action_horizon :].float()
        velocity = self.action_out_proj(suffix_out.to(self.action_out_proj.weight.dtype)).float()
        return velocity, suffix_out, prefix_out

    @torch.no_grad()
    def sample_actions(
        self,
        images: list[Tensor],
        image_masks: list[Tensor],
        tokens: Tensor,
        token_masks: Tensor,
        state: Tensor | None,
        num_steps: int = 10,
        noise: Tensor | None = None,
    ) -> Tensor:
        """Deterministic Euler integration of the flow, t = 1 → 0 on the grid ``τ_i = 1 - i/num_steps``.

        Returns normalised padded actions ``[B, H, action_dim]`` (float32). ``noise`` (``[B, H, action_dim]``,
        default standard normal) is x at t = 1.
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        cache = self.prefix_cache(images, image_masks, tokens, token_masks, state)
        bsz = tokens.shape[0]
        shape = (bsz, self.config.action_horizon, self.config.action_dim)
        x = torch.randn(shape, device=tokens.device) if noise is None else noise.float()
        for i in range(num_steps):
            tau = 1.0 - i / num_steps
            v, _ = self.suffix_forward(cache, None, x, torch.full((bsz,), tau, device=x.device))
            x = x - v / num_steps
        return x

    # ---- checkpoints ----
    def tie_weights(self) -> None:
        """``paligemma.lm_head.weight`` is ``embed_tokens.weight`` (Gemma ties them; a load with ``assign`` unties)."""
        pg = self.paligemma_with_expert.paligemma
        pg.lm_head.weight = pg.model.language_model.embed_tokens.weight

    def materialize_buffers(self, device: torch.device | str | None = None) -> None:
        """Recompute the non-persistent buffers (RoPE frequencies, SigLIP position ids) after a meta-device build
        whose parameters were loaded with ``assign=True`` (those buffers are in no checkpoint)."""
        device = torch.device(device) if device is not None else next(self.parameters()).device
        rope = self.paligemma_with_expert.vlm.rotary_emb
        inv_freq, scaling = rope.compute_default_rope_parameters(rope.config, device=device)
        rope.inv_freq = inv_freq.to(device)
        rope.original_inv_freq = inv_freq.clone().to(device)
        rope.attention_scaling = scaling
        emb = self.paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings
        emb.position_ids = torch.arange(emb.num_positions, device=device).expand((1, -1))

    def released_state_dict(self) -> dict[str, Tensor]:
        """The state dict as openpi saves it: tied ``embed_tokens`` dropped (``lm_head`` kept)."""
        return {k: v for k, v in self.state_dict().items() if k != EMBED_KEY}


def unused_vlm_prefixes(depth: int, prefix_output_read: bool) -> tuple[str, ...]:
    """Unless a head reads the VLM's prefix output, no gradient reaches the last VLM layer's query / output
    projections, MLP and post-attention norm, nor the final norm: the expert reads only the VLM layers' keys and
    values."""
    if prefix_output_read:
        return ()
    vlm = "paligemma_with_expert.paligemma.model.language_model."
    last = f"{vlm}layers.{depth - 1}."
    return tuple(last + m for m in ("self_attn.q_proj.", "self_attn.o_proj.", "mlp.", "post_attention_layernorm.")) + (
        f"{vlm}norm.",
    )


__all__ = ["OpenPIModel", "PaliGemmaWithExpert", "PrefixCache", "unused_vlm_prefixes"]
