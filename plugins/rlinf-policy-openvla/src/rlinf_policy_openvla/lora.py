"""Prismatic's default LoRA targets; LoRA itself (peft, :class:`~rlinf_core.models.lora.LoRAConfig`,
forward-path check, merge-and-export) lives in :mod:`rlinf_core.models.lora`."""

from __future__ import annotations

from torch import nn


def default_target_modules(vla: nn.Module) -> str:
    """Regex over module names: RLinf's LoRA targets, restricted to layers that run.

    Vision towers (``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2`` of every block but the last,
    whose output Prismatic never reads), projector ``fc1..fc3``, and Llama's attention and MLP
    projections plus ``lm_head``. Written as a regex so SigLIP's projections are not matched by
    accident and the value head never gets an adapter.
    """
    towers = []
    for name in ("featurizer", "fused_featurizer"):
        tower = getattr(vla.vision_backbone, name, None)
        if tower is not None:
            used = "|".join(str(i) for i in range(tower.spec.depth - 1))
            towers.append(rf"vision_backbone\.{name}\.blocks\.({used})\.(attn\.(qkv|proj)|mlp\.fc[12])")
    llm = r"language_model\.(model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)|lm_head)"
    return "|".join([*towers, r"projector\.fc[123]", llm])
