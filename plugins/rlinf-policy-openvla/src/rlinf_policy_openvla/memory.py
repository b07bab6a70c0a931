"""The transformer stacks an OpenVLA / OpenVLA-OFT sample runs through, for ``rlinf memory``."""

from __future__ import annotations

from rlinf_core.contracts import MemoryProfile, Stack

DEFAULT_PROMPT_TOKENS = 48  # "In: What action should the robot take to <task>?\nOut:" with a long LIBERO task


def prismatic_profile(policy) -> MemoryProfile:
    """Stacks of ``policy.evaluate`` for one sample: every vision tower (up to its second-to-last
    block, over all camera views) and the Llama trunk over ``[BOS, patches, proprio, prompt, actions]``."""
    spec, vla = policy.spec, policy.vla
    ckpt = bool(getattr(policy, "gradient_checkpointing", False))
    views = policy.num_images_in_input
    lora = _lora_rank(policy)
    stacks = []
    patches = 0
    for name, tower in zip(("featurizer", "fused_featurizer"), spec.vision):
        stacks.append(
            Stack(
                name=f"vision.{name}",
                kind="vit",
                layers=tower.depth - 1,
                tokens=(tower.num_patches + tower.num_prefix) * views,
                hidden=tower.width,
                ffn=tower.mlp_dim,
                heads=tower.heads,
                layer_scale=tower.layer_scale,
                lora_rank=lora,
                checkpointed=ckpt,
            )
        )
        patches = tower.num_patches
    prompt = policy.prompts.max_prompt_length or DEFAULT_PROMPT_TOKENS
    n = policy.num_action_tokens
    actions = n if policy.model_type == "openvla_oft" else n - 1
    prefix = 1 + patches * views + int(policy.use_proprio) + prompt - 1
    cfg = vla.text_config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    stacks.append(
        Stack(
            name="llm",
            kind="llama",
            layers=cfg.num_hidden_layers,
            tokens=prefix + actions,
            hidden=cfg.hidden_size,
            ffn=cfg.intermediate_size,
            heads=cfg.num_attention_heads,
            lora_rank=lora,
            checkpointed=ckpt,
        )
    )
    other = {mode: _other_bytes(policy, mode, prefix + actions, views) for mode in ("fp32", "mixed", "bf16")}
    kv = prefix + n if policy.model_type == "openvla" else 0
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return MemoryProfile(tuple(stacks), other, kv, kv_heads * head_dim, cfg.num_hidden_layers)


def _other_bytes(policy, mode: str, llm_tokens: int, views: int) -> int:
    """Per-sample bytes autograd keeps outside the blocks: pixels (patch-embedding input), the
    projector MLP, the final RMSNorm, the LM-head input and the action-bin log-softmax/entropy."""
    spec = policy.spec
    c = 4 if mode == "fp32" else 2
    h, n = spec.llm_dim, policy.num_action_tokens
    patches = spec.vision[0].num_patches * views
    pixels = sum(3 * t.image_size**2 * c for t in spec.vision) * views  # every tower's normalised input
    if policy.is_lora:
        pixels = 0  # a frozen patch embedding keeps nothing for backward
    vdim = spec.vision_dim
    proj = (9 * vdim + 2 * h) if spec.projector == "fused-gelu-mlp" else (vdim + 2 * h)
    norm = 8 if mode != "bf16" else 4  # final RMSNorm (its fp32 upcast and normalised output)
    return pixels + c * proj * patches + norm * h * llm_tokens + c * h * n + 8 * spec.n_action_bins * n


def _lora_rank(policy) -> int:
    if not policy.is_lora:
        return 0
    configs = getattr(policy.model, "peft_config", {}) or {}
    return max((int(getattr(c, "r", 0) or 0) for c in configs.values()), default=0)
