"""The Prismatic VLA network (OpenVLA / OpenVLA-OFT) with Prismatic parameter names.

Module tree (= checkpoint keys): ``vision_backbone.{featurizer, fused_featurizer}`` (timm-layout
ViTs), ``projector.{fc1, fc2, fc3}``, ``language_model`` (``transformers.LlamaForCausalLM``:
``language_model.model.*``, ``language_model.lm_head``), optional ``proprio_projector.{fc1, fc2}``
(official OFT) and ``value_head.mlp.*`` (RLinf's critic, :class:`rlinf_core.models.value_head.ValueHead`).
Imports transformers; load lazily.
"""

from __future__ import annotations

import torch
from torch import nn

from rlinf_core import require
from rlinf_core.models.value_head import ValueHead
from rlinf_policy_openvla.checkpoint import CheckpointError, PrismaticSpec

LlamaForCausalLM = require("transformers", "pip install 'transformers>=5,<6'", "rlinf-policy-openvla").LlamaForCausalLM
from rlinf_policy_openvla.vit import TimmViT  # noqa: E402 - after the transformers check


class VisionBackbone(nn.Module):
    def __init__(self, spec: PrismaticSpec) -> None:
        super().__init__()
        self.featurizer = TimmViT(spec.vision[0])
        if len(spec.vision) > 1:
            self.fused_featurizer = TimmViT(spec.vision[1])

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3·towers, S, S]`` (tower-normalised images stacked on channels) → ``[B, P, vision_dim]``."""
        feats = self.featurizer(pixels[:, :3])
        if hasattr(self, "fused_featurizer"):
            feats = torch.cat([feats, self.fused_featurizer(pixels[:, 3:6])], dim=-1)
        return feats


class Projector(nn.Module):
    def __init__(self, spec: PrismaticSpec) -> None:
        super().__init__()
        vdim, ldim = spec.vision_dim, spec.llm_dim
        self.act = nn.GELU()
        if spec.projector == "fused-gelu-mlp":
            self.fc1 = nn.Linear(vdim, 4 * vdim)
            self.fc2 = nn.Linear(4 * vdim, ldim)
            self.fc3 = nn.Linear(ldim, ldim)
        else:
            self.fc1 = nn.Linear(vdim, ldim)
            self.fc2 = nn.Linear(ldim, ldim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc2(self.act(self.fc1(x)))
        if hasattr(self, "fc3"):
            x = self.fc3(self.act(x))
        return x


class ProprioProjector(nn.Module):
    """Official OpenVLA-OFT proprio projector: one extra LLM token from the robot state."""

    def __init__(self, proprio_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(proprio_dim, llm_dim)
        self.act_fn1 = nn.GELU()
        self.fc2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act_fn1(self.fc1(x)))


class PrismaticVLA(nn.Module):
    """Vision backbone + projector + Llama, optional proprio projector and value head."""

    def __init__(self, spec: PrismaticSpec, *, proprio_dim: int | None = None, value_dim: int | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.vision_backbone = VisionBackbone(spec)
        self.projector = Projector(spec)
        self.text_config = spec.llama_config
        self.language_model = LlamaForCausalLM(self.text_config)
        if proprio_dim:
            self.proprio_projector = ProprioProjector(proprio_dim, spec.llm_dim)
        if value_dim:
            self.value_head = ValueHead(spec.llm_dim, value_dim)

    def set_gradient_checkpointing(self, enabled: bool) -> None:
        """Recompute activations in the backward (train mode only): Llama decoder layers through transformers
        (non-reentrant ``torch.utils.checkpoint``) and the ViT blocks of the vision towers."""
        lm = self.language_model
        new_api = hasattr(lm, "activation_checkpointing_enable")  # newer transformers; older: gradient_checkpointing_*
        if enabled and new_api:
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        elif enabled:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            (lm.activation_checkpointing_disable if new_api else lm.gradient_checkpointing_disable)()
        for name in ("featurizer", "fused_featurizer"):
            tower = getattr(self.vision_backbone, name, None)
            if tower is not None:
                tower.gradient_checkpointing = enabled

    # ---- pieces ---------------------------------------------------------------------------------
    def unused_parameter_prefixes(self) -> list[str]:
        out = []
        for name in ("featurizer", "fused_featurizer"):
            tower = getattr(self.vision_backbone, name, None)
            if tower is not None:
                out += [f"vision_backbone.{name}.{p}" for p in tower.unused_parameter_prefixes()]
        return out

    def embed_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3·towers·N, S, S]`` for N images → projected patch embeddings ``[B, P·N, llm_dim]``."""
        per_image = 3 * len(self.spec.vision)
        chunks = pixels.split(per_image, dim=1)
        B = pixels.shape[0]
        # one backbone pass over all images of the batch
        stacked = torch.cat(chunks, dim=0)
        feats = self.projector(self.vision_backbone(stacked))
        return torch.cat(feats.split(B, dim=0), dim=1)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.language_model.get_input_embeddings()(ids)

    def build_prefix(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        pixels: torch.Tensor,
        proprio: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[BOS, patches, (proprio), prompt[1:]]`` embeddings and their 0/1 mask.

        ``input_ids`` are left-padded with BOS kept at column 0.
        """
        text = self.embed_tokens(input_ids)
        patches = self.embed_images(pixels.to(text.dtype))
        extra = [patches]
        if proprio is not None:
            if not hasattr(self, "proprio_projector"):
                raise ValueError("proprio given but the model has no proprio projector (use_proprio is off)")
            extra.append(self.proprio_projector(proprio.to(text.dtype)).unsqueeze(1))
        vis = torch.cat(extra, dim=1)
        embeds = torch.cat([text[:, :1], vis, text[:, 1:]], dim=1)
        ones = attention_mask.new_ones(vis.shape[:2])
        mask = torch.cat([attention_mask[:, :1], ones, attention_mask[:, 1:]], dim=1)
        return embeds, mask

    def run_llm(
        self,
        embeds: torch.Tensor,
        mask: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache=None,
        use_cache: bool = False,
    ):
        """Llama trunk (no LM head). ``attn_mask`` (4-D bool, True = attend) overrides the causal 2-D ``mask``.

        ``cache``: the KV cache of the previous call (its output's ``cache``; transformers renamed
        ``past_key_values`` to ``cache`` and removes the old name in 5.40).
        """
        if position_ids is None:
            position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
        # transformers drops the KV cache of checkpointed layers in train mode; without grad there is nothing to save
        paused = []
        if not torch.is_grad_enabled() and getattr(self.language_model.model, "gradient_checkpointing", False):
            paused = [m for m in self.language_model.modules() if getattr(m, "gradient_checkpointing", False) is True]
        for layer in paused:
            layer.gradient_checkpointing = False
        try:
            return self.language_model.model(
                inputs_embeds=embeds,
                attention_mask=attn_mask if attn_mask is not None else mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=use_cache,
            )
        finally:
            for layer in paused:
                layer.gradient_checkpointing = True

    def lm_logits(self, hidden: torch.Tensor, begin: int, n_bins: int) -> torch.Tensor:
        """Logits of the action ids ``[begin, begin + n_bins)``, float32."""
        return self.language_model.lm_head(hidden)[..., begin : begin + n_bins].float()

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.value_head(hidden).float()


def build_vla(spec: PrismaticSpec, *, proprio_dim=None, value_dim=None, meta: bool = False) -> PrismaticVLA:
    """Build the network; ``meta=True`` allocates no memory for the backbone (weights come from a checkpoint)."""
    if not meta:
        return PrismaticVLA(spec, proprio_dim=proprio_dim, value_dim=value_dim)
    with torch.device("meta"):
        vla = PrismaticVLA(spec)
    # heads that a checkpoint may lack are created for real (randomly initialised)
    if proprio_dim:
        vla.proprio_projector = ProprioProjector(proprio_dim, spec.llm_dim)
    if value_dim:
        vla.value_head = ValueHead(spec.llm_dim, value_dim)
    return vla


def load_into(vla: PrismaticVLA, state: dict[str, torch.Tensor], source: str, dtype: torch.dtype) -> None:
    """Assign checkpoint tensors (cast to ``dtype``) with one-line errors for missing / extra / misshaped keys."""
    own = vla.state_dict()
    optional = ("value_head.", "proprio_projector.")
    ignored_extra = ("action_head.",)  # official OFT L1 head: not used by the discrete-token policies
    shape_err = [
        (k, tuple(state[k].shape), tuple(v.shape)) for k, v in own.items() if k in state and state[k].shape != v.shape
    ]
    if shape_err:
        k, got, want = shape_err[0]
        raise CheckpointError(
            f"{source}: parameter {k!r} has shape {got} in the checkpoint but {want} in the model built from "
            "config.json"
            f" ({len(shape_err)} mismatches; check text_config / timm_model_configs / value_type / proprio_dim)"
        )
    unexpected = [
        k
        for k in state
        if k not in own and not k.startswith(ignored_extra + optional) and not k.endswith("rotary_emb.inv_freq")
    ]
    if unexpected:
        raise CheckpointError(
            f"{source}: {len(unexpected)} checkpoint tensors do not belong to an OpenVLA model, e.g. {unexpected[0]!r}"
        )
    missing = [k for k in own if k not in state and not k.startswith(optional)]
    if missing:
        raise CheckpointError(
            f"{source}: checkpoint lacks {len(missing)} parameters, e.g. {missing[0]!r}; is it an OpenVLA checkpoint"
            " matching its config.json?"
        )
    for k, v in own.items():
        t = state.get(k)
        if t is None:
            continue
        if v.is_floating_point() and not t.is_floating_point():
            raise CheckpointError(f"{source}: parameter {k!r} is stored as {t.dtype}, expected a floating-point dtype")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{source}: parameter {k!r} holds NaN or inf values; re-download or re-export it")
    wanted = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items() if k in own}
    vla.load_state_dict(wanted, strict=False, assign=True)
    _materialize_buffers(vla)


def _materialize_buffers(vla: PrismaticVLA) -> None:
    """Rebuild non-persistent buffers left on the meta device (Llama's rotary frequencies)."""
    rotary = vla.language_model.model.rotary_emb
    if any(b.is_meta for b in rotary.buffers()):
        vla.language_model.model.rotary_emb = type(rotary)(config=vla.text_config)
    leftover = [n for n, t in list(vla.named_parameters()) + list(vla.named_buffers()) if t.is_meta]
    if leftover:
        raise CheckpointError(f"model tensors were not initialised from the checkpoint, e.g. {leftover[0]!r}")
