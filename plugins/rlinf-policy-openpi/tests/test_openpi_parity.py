"""π0 against an independent implementation: transformers 5's native ``PI0ForConditionalGeneration``.

transformers' PI0 (π0 only, no adaRMS) shares no code with ``_modeling`` beyond the Gemma / SigLIP modules: its
own prefix embedding (image placeholder tokens, the v5 scaled word embedding), block masks, positions, time
embedding and KV-cache handling. The same weights must give the same velocity.
"""

import pytest
import torch
from transformers import PI0Config, PI0ForConditionalGeneration

from rlinf_core.testing.numerics import assert_close_reordered
from rlinf_policy_openpi.checkpoint import load_model
from rlinf_policy_openpi.testing import FLOAT32_SUMS, make_inputs

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

_RENAMES = (
    ("paligemma_with_expert.paligemma.model.vision_tower.vision_model.", "model.vlm.vision_tower."),
    ("paligemma_with_expert.paligemma.model.", "model.vlm."),
    ("paligemma_with_expert.gemma_expert.model.", "model.dit."),
)


def _hf_model(config):
    vlm, ex, vis = config.vlm, config.expert, config.vision

    def gemma(d):
        return {
            "model_type": "gemma",
            "hidden_size": d.width,
            "num_hidden_layers": d.depth,
            "intermediate_size": d.mlp_dim,
            "num_attention_heads": d.num_heads,
            "num_key_value_heads": d.num_kv_heads,
            "head_dim": d.head_dim,
        }

    vision = {
        "model_type": "siglip_vision_model",
        "intermediate_size": vis.mlp_dim,
        "hidden_size": vis.width,
        "patch_size": vis.patch_size,
        "image_size": vis.image_size,
        "num_hidden_layers": vis.depth,
        "num_attention_heads": vis.num_heads,
        "vision_use_head": False,
    }
    cfg = PI0Config(
        vlm_config={
            "model_type": "paligemma",
            "text_config": {**gemma(vlm), "vocab_size": config.vocab_size},
            "vision_config": vision,
            "projection_dim": vlm.width,
            "image_token_id": config.vocab_size,
        },
        dit_config=gemma(ex),
        chunk_size=config.action_horizon,
    )
    return PI0ForConditionalGeneration(cfg).eval()


def test_pi0_velocity_equals_transformers_pi0(tiny):
    model, _ = load_model(tiny(pi05=False))
    model.eval()
    config = model.config
    hf = _hf_model(config)
    state = {}
    for key, value in model.state_dict().items():
        if key.endswith("paligemma.lm_head.weight"):
            continue  # the base PaliGemmaModel has no LM head
        for old, new in _RENAMES:
            key = key.replace(old, new)
        if key.startswith(("action_in_proj.", "state_proj.", "action_time_mlp_")):
            key = "embed_action_time." + key
        state[key] = value
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert missing == ["model.dit.embed_tokens.weight"] and not unexpected  # the expert's unused embedding

    images, masks, tokens, token_masks, state_in, x_t, t = make_inputs(config)  # sample 0: padded prompt
    masks = [torch.ones_like(m) for m in masks]
    bsz, n_img = tokens.shape[0], config.num_images * config.num_image_tokens
    input_ids = torch.cat([torch.full((bsz, n_img), config.vocab_size), tokens], 1)
    attention = torch.cat([torch.ones(bsz, n_img, dtype=torch.long), token_masks.long()], 1)
    with torch.no_grad():
        ours, _ = model.suffix_forward(model.prefix_cache(images, masks, tokens, token_masks, state_in), None, x_t, t)
        theirs = hf(
            state=state_in,
            noise=x_t,
            timestep=t,
            input_ids=input_ids,
            pixel_values=torch.stack(images, 1),
            pixel_attention_mask=torch.ones(bsz, config.num_images, dtype=torch.bool),
            attention_mask=attention,
        ).logits
        ours_sampled = model.sample_actions(images, masks, tokens, token_masks, state_in, num_steps=3, noise=x_t)
        theirs_sampled = hf.sample_actions(
            state=state_in,
            input_ids=input_ids,
            pixel_values=torch.stack(images, 1),
            noise=x_t.clone(),
            attention_mask=attention,
            num_steps=3,
            pixel_attention_mask=torch.ones(bsz, config.num_images, dtype=torch.bool),
        )
    # the same maths in other float32 operations (attention, RoPE and norms written otherwise): rounding of the tiny
    # model's passes (FLOAT32_SUMS; measured 1.3e-5 of the velocity's size, the bound 1.1e-4); three Euler steps
    # chain three passes
    n, depth = FLOAT32_SUMS
    assert_close_reordered(ours, theirs, n, depth)
    assert_close_reordered(ours_sampled, theirs_sampled, n, 3 * depth)
