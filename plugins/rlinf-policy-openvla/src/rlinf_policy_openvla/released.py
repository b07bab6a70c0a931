"""The released OpenVLA / OpenVLA-OFT checkpoints as data, and released-form model directories for tests.

``RELEASED`` maps a checkpoint kind to its Hugging Face repo(s), the ``config.json`` fields it ships
(everything but ``norm_stats``) and the dataset keys of its ``norm_stats``. :func:`write_released_dir`
writes a directory a user would download, minus the weights: ``config.json`` exactly in the released
form (``text_config`` with only the fields that differ from ``LlamaConfig``'s Llama-2-7B defaults),
a ``model.safetensors.index.json`` naming every released tensor, tokenizer files built locally with
Llama-2's 32000 pieces + ``<PAD>``, processor files and ``dataset_statistics.json``. Build a policy on
it under :func:`rlinf_core.models.meta.meta_init` to get the full-size architecture without any weights.

Sources: the ``config.json`` fields are those of openvla/openvla-7b (Prismatic's ``OpenVLAConfig``
serialised by transformers 4.40, as read in openvla/openvla's ``configuration_prismatic.py`` and the
published file); the OFT and RLinf checkpoints are fine-tunes saved by the same code, so they carry
the same fields with their own ``norm_stats`` keys. The statistics' values here are placeholders in
the released format (7-D ``action`` / ``proprio`` with ``mean, std, max, min, q01, q99, mask``). The
tensor names follow timm's ViT layout (Prismatic's ``LayerScale.gamma`` renamed ``scale_factor``) and
transformers' Llama layout; openvla-7b's published index totals 15,082,474,368 bytes (bf16), i.e.
7,541,237,184 parameters, which :func:`released_tensor_shapes` reproduces.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from rlinf_core.models.weights import INDEX_NAME
from rlinf_policy_openvla.make_tiny import build_tokenizer, write_side_files

OPENVLA_7B_PARAMETERS = 7_541_237_184
OPENVLA_7B_INDEX_BYTES = 15_082_474_368  # "total_size" of openvla/openvla-7b's model.safetensors.index.json (bf16)
LLAMA2_VOCAB = 32000  # SentencePiece pieces; <PAD> = 32000 is added, embedding rows padded to 32064

# config.json of openvla/openvla-7b without norm_stats (key order as in the file)
OPENVLA_7B_CONFIG: dict = {
    "arch_specifier": "no-align+fused-gelu-mlp",
    "architectures": ["OpenVLAForActionPrediction"],
    "auto_map": {
        "AutoConfig": "configuration_prismatic.OpenVLAConfig",
        "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction",
    },
    "hf_llm_id": "meta-llama/Llama-2-7b-hf",
    "image_resize_strategy": "resize-naive",
    "image_sizes": [224, 224],
    "llm_backbone_id": "llama2-7b-pure",
    "llm_max_length": 2048,
    "model_type": "openvla",
    "n_action_bins": 256,
    "output_projector_states": False,
    "pad_to_multiple_of": 64,
    "pad_token_id": 32000,
    "text_config": {"model_type": "llama", "pad_token_id": 32000, "torch_dtype": "bfloat16", "vocab_size": 32064},
    "timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
    "timm_override_act_layers": [None, None],
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_fused_vision_backbone": True,
    "vision_backbone_id": "dinosiglip-vit-so-224px",
}

# a few of openvla-7b's Open X-Embodiment norm_stats keys (fine-tunes keep them and add their own)
OXE_KEYS = ("fractal20220817_data", "kuka", "bridge_orig", "taco_play", "jaco_play", "roboturk", "viola", "toto")


@dataclass(frozen=True)
class ReleasedKind:
    """One family of released checkpoints sharing ``config.json`` fields and ``norm_stats`` keys."""

    repos: tuple[str, ...]
    norm_keys: tuple[str, ...]
    action_dim: int = 7
    proprio_dim: int = 7  # size of the (unused) proprio statistics in the file
    num_shards: int = 4
    official_oft_extras: bool = False  # action_head--/proprio_projector--*_checkpoint.pt side files
    dataset_statistics: bool = True
    # how the pipeline that trained / evaluates it resized images: "tensor" (RLinf's rollout, TVF.resize of
    # tensors) or "pil" (openvla/openvla's HF processor, PIL images; official OFT: see docs/configs.md)
    image_resize: str = "tensor"


RELEASED: dict[str, ReleasedKind] = {
    "openvla-7b": ReleasedKind(
        ("openvla/openvla-7b",), OXE_KEYS, num_shards=3, dataset_statistics=False, image_resize="pil"
    ),
    "openvla-7b-rlvla-warmup": ReleasedKind(
        ("gen-robot/openvla-7b-rlvla-warmup", "RLinf/RLinf-OpenVLA-PPO-ManiSkill3-25ood"), OXE_KEYS, num_shards=3
    ),
    "openvla-oft-sft-libero": ReleasedKind(
        (
            "Haozhan72/Openvla-oft-SFT-libero-spatial-traj1",
            "Haozhan72/Openvla-oft-SFT-libero-object-traj1",
            "Haozhan72/Openvla-oft-SFT-libero-goal-traj1",
            "Haozhan72/Openvla-oft-SFT-libero10-traj1",
            "Haozhan72/Openvla-oft-SFT-libero10-trajall",
        ),
        OXE_KEYS + ("libero_spatial_no_noops", "libero_object_no_noops", "libero_goal_no_noops", "libero_10_no_noops"),
    ),
    "rlinf-openvla-oft-libero-130": ReleasedKind(
        ("RLinf/RLinf-OpenVLAOFT-LIBERO-130-Base-Lora", "RLinf/RLinf-OpenVLAOFT-LIBERO-90-Base-Lora"),
        OXE_KEYS + ("libero_130_no_noops_trajall", "libero_90_no_noops_trajall"),
    ),
    "rlinf-openvla-oft-maniskill": ReleasedKind(("RLinf/RLinf-OpenVLAOFT-ManiSkill-Base-Main",), OXE_KEYS),
    "rlinf-openvla-oft-metaworld": ReleasedKind(
        ("RLinf/RLinf-OpenVLAOFT-MetaWorld-SFT",),
        ("meta_world_strict",),  # 7-D statistics (RLinf decodes 7-D)
    ),
    "openvla-oft-official-libero": ReleasedKind(
        ("moojink/openvla-7b-oft-finetuned-libero-spatial",),
        OXE_KEYS + ("libero_spatial_no_noops",),
        proprio_dim=8,
        official_oft_extras=True,
        image_resize="pil",
    ),
}


def default_image_resize(model_path: str | Path) -> tuple[str, str]:
    """``(image_resize, why)`` for a checkpoint directory whose config.json records none, decided from the files
    it holds, never from its name (see docs/configs.md, "OpenVLA / OFT image resize"):

    - the HF Prismatic processor (``preprocessor_config.json``, as openvla/openvla's ``save_pretrained`` and
      official OpenVLA-OFT write it): that processor resizes PIL images → ``pil``;
    - no processor file: taken for RLinf's rollout resize of tensors → ``tensor``.

    Both are guesses about how the weights were trained (RLinf's releases ship the processor of their SFT base
    but were trained with the tensor resize): the policy prints :func:`announce_image_resize`'s line.
    """
    path = Path(model_path)
    if (path / "preprocessor_config.json").is_file():
        return "pil", "its preprocessor_config.json is the HF Prismatic processor, which resizes PIL images"
    return "tensor", "no preprocessor_config.json: taken for RLinf's rollout resize of tensors"


def announce_image_resize(model_path: str | Path, mode: str, why: str) -> None:
    """The one line a load prints when ``image_resize`` is a guess: the mode, why, and the key that changes it."""

    print(
        f"rlinf: note: {model_path}: image_resize={mode} ({why}); set inputs.image_resize: "
        f"{'tensor' if mode == 'pil' else 'pil'} if it was trained the other way",
        file=sys.stderr,
    )


def released_config(kind: str) -> dict:
    """``config.json`` of a released kind (placeholder statistics under its real ``norm_stats`` keys)."""
    spec = _kind(kind)
    return {**OPENVLA_7B_CONFIG, "norm_stats": {k: _stats(spec, i) for i, k in enumerate(spec.norm_keys)}}


def _kind(kind: str) -> ReleasedKind:
    if kind not in RELEASED:
        raise ValueError(f"unknown released checkpoint kind {kind!r}; known: {', '.join(RELEASED)}")
    return RELEASED[kind]


def _stats(spec: ReleasedKind, i: int) -> dict:
    a, p = spec.action_dim, spec.proprio_dim
    low = [-0.9 - 0.01 * ((i + d) % 5) for d in range(a)]
    high = [0.9 + 0.01 * ((i + d) % 7) for d in range(a)]
    mask = [True] * (a - 1) + [False]
    return {
        "action": {
            "mean": [0.0] * a,
            "std": [0.5] * a,
            "max": [1.0] * a,
            "min": [-1.0] * a,
            "q01": low,
            "q99": high,
            "mask": mask,
        },
        "proprio": {
            "mean": [0.0] * p,
            "std": [0.0] * p,
            "max": [0.0] * p,
            "min": [0.0] * p,
            "q01": [0.0] * p,
            "q99": [0.0] * p,
        },
        "num_transitions": 100000 + i,
        "num_trajectories": 1000 + i,
    }


# ---- the released tensors ---------------------------------------------------------------------------
def _vit(
    prefix: str,
    width: int,
    depth: int,
    mlp: int,
    *,
    reg: int,
    layer_scale: bool,
    attn_pool: bool,
    patches: int = 256,
    patch: int = 14,
) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    if reg:
        out[f"{prefix}.cls_token"] = (1, 1, width)
        out[f"{prefix}.reg_token"] = (1, reg, width)
    out[f"{prefix}.pos_embed"] = (1, patches, width)
    out[f"{prefix}.patch_embed.proj.weight"] = (width, 3, patch, patch)
    out[f"{prefix}.patch_embed.proj.bias"] = (width,)
    for b in range(depth):
        blk = f"{prefix}.blocks.{b}"
        for norm in ("norm1", "norm2"):
            out[f"{blk}.{norm}.weight"] = out[f"{blk}.{norm}.bias"] = (width,)
        out[f"{blk}.attn.qkv.weight"], out[f"{blk}.attn.qkv.bias"] = (3 * width, width), (3 * width,)
        out[f"{blk}.attn.proj.weight"], out[f"{blk}.attn.proj.bias"] = (width, width), (width,)
        out[f"{blk}.mlp.fc1.weight"], out[f"{blk}.mlp.fc1.bias"] = (mlp, width), (mlp,)
        out[f"{blk}.mlp.fc2.weight"], out[f"{blk}.mlp.fc2.bias"] = (width, mlp), (width,)
        if layer_scale:
            out[f"{blk}.ls1.scale_factor"] = out[f"{blk}.ls2.scale_factor"] = (width,)
    out[f"{prefix}.norm.weight"] = out[f"{prefix}.norm.bias"] = (width,)
    if attn_pool:
        ap = f"{prefix}.attn_pool"
        out[f"{ap}.latent"] = (1, 1, width)
        out[f"{ap}.q.weight"], out[f"{ap}.q.bias"] = (width, width), (width,)
        out[f"{ap}.kv.weight"], out[f"{ap}.kv.bias"] = (2 * width, width), (2 * width,)
        out[f"{ap}.proj.weight"], out[f"{ap}.proj.bias"] = (width, width), (width,)
        out[f"{ap}.norm.weight"] = out[f"{ap}.norm.bias"] = (width,)
        out[f"{ap}.mlp.fc1.weight"], out[f"{ap}.mlp.fc1.bias"] = (mlp, width), (mlp,)
        out[f"{ap}.mlp.fc2.weight"], out[f"{ap}.mlp.fc2.bias"] = (width, mlp), (width,)
    return out


def released_tensor_shapes() -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors in openvla-7b's safetensors (shared by every kind above).

    Written from the published architecture, independently of :mod:`rlinf_policy_openvla._modeling`:
    DINOv2 ViT-L/14 + 4 registers (1024-d, 24 blocks, LayerScale), SigLIP So400m/14 (1152-d, 27 blocks,
    MLP 4304, MAP head), fused GELU-MLP projector 2176 → 8704 → 4096 → 4096, Llama-2-7B with 32064
    embedding rows and an untied LM head.
    """
    out = _vit("vision_backbone.featurizer", 1024, 24, 4096, reg=4, layer_scale=True, attn_pool=False)
    out |= _vit("vision_backbone.fused_featurizer", 1152, 27, 4304, reg=0, layer_scale=False, attn_pool=True)
    vdim, hidden, inter, vocab = 1024 + 1152, 4096, 11008, 32064
    out["projector.fc1.weight"], out["projector.fc1.bias"] = (4 * vdim, vdim), (4 * vdim,)
    out["projector.fc2.weight"], out["projector.fc2.bias"] = (hidden, 4 * vdim), (hidden,)
    out["projector.fc3.weight"], out["projector.fc3.bias"] = (hidden, hidden), (hidden,)
    lm = "language_model.model"
    out[f"{lm}.embed_tokens.weight"] = (vocab, hidden)
    for i in range(32):
        layer = f"{lm}.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[f"{layer}.self_attn.{proj}.weight"] = (hidden, hidden)
        out[f"{layer}.mlp.gate_proj.weight"] = out[f"{layer}.mlp.up_proj.weight"] = (inter, hidden)
        out[f"{layer}.mlp.down_proj.weight"] = (hidden, inter)
        out[f"{layer}.input_layernorm.weight"] = out[f"{layer}.post_attention_layernorm.weight"] = (hidden,)
    out[f"{lm}.norm.weight"] = (hidden,)
    out["language_model.lm_head.weight"] = (vocab, hidden)
    return out


def _index(num_shards: int) -> dict:
    """``model.safetensors.index.json`` with the released names (bf16 sizes; shard assignment by size)."""
    shapes = released_tensor_shapes()
    sizes = {k: 2 * _numel(s) for k, s in shapes.items()}
    total = sum(sizes.values())
    weight_map, done = {}, 0
    for name in shapes:
        shard = min(num_shards - 1, done * num_shards // total)
        weight_map[name] = f"model-{shard + 1:05d}-of-{num_shards:05d}.safetensors"
        done += sizes[name]
    return {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# ---- directories --------------------------------------------------------------------------------------
TOKENIZER_FILES = (
    "tokenizer.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)


# runs of shipped configs whose exported policy (``<run>/policy``) other shipped configs evaluate: their base kind
EXPORTED_RUNS = {"libero_130_grpo_openvlaoft": "rlinf-openvla-oft-libero-130"}


def kind_of_path(model_path: str | Path) -> str | None:
    """The released kind whose repo a (placeholder) ``model_path`` names by its last component
    (``/path/to/Openvla-oft-SFT-libero-spatial-traj1`` -> ``openvla-oft-sft-libero``), or whose exported
    policy it is (``/path/to/libero_130_grpo_openvlaoft/policy``), else None."""
    path = Path(str(model_path))
    if path.name == "policy" and path.parent.name in EXPORTED_RUNS:
        return EXPORTED_RUNS[path.parent.name]
    name = path.name
    return next((kind for kind, spec in RELEASED.items() if any(r.split("/")[-1] == name for r in spec.repos)), None)


def write_released_standin(model_path: str | Path, directory: str | Path) -> Path | None:
    """A weightless released-form directory under ``directory`` for the checkpoint a placeholder ``model_path``
    names (``rlinf memory`` builds the architecture from it on the meta device), else None."""
    kind = kind_of_path(model_path)
    return None if kind is None else write_released_dir(Path(directory) / kind, kind)


def write_released_dir(path: str | Path, kind: str, tokenizer_from: str | Path | None = None) -> Path:
    """Write a weightless directory in the layout of the released ``kind`` (see :data:`RELEASED`).

    ``tokenizer_from``: copy the tokenizer files of an earlier released-form directory instead of
    building them again (all kinds share Llama-2's vocabulary).
    """

    spec = _kind(kind)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = released_config(kind)
    if tokenizer_from is not None:
        for name in TOKENIZER_FILES:
            shutil.copy2(Path(tokenizer_from) / name, path / name)
        pad = LLAMA2_VOCAB
    else:
        pad = build_tokenizer(path, config["n_action_bins"], config["pad_to_multiple_of"], vocab_size=LLAMA2_VOCAB)
    write_side_files(path, pad, config["image_sizes"][0])
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (path / INDEX_NAME).write_text(json.dumps(_index(spec.num_shards), indent=2) + "\n")
    if spec.dataset_statistics:
        last = spec.norm_keys[-1]
        (path / "dataset_statistics.json").write_text(json.dumps({last: config["norm_stats"][last]}, indent=2) + "\n")
    if spec.official_oft_extras:  # names only: a meta build never opens them
        for module in ("action_head", "proprio_projector"):
            (path / f"{module}--150000_checkpoint.pt").touch()
    return path


# RLinf's LoRA targets (rlinf/models/__init__.py, get_model): vision, projector and LLM projections
RLINF_LORA_TARGETS = [
    "proj",
    "qkv",
    "fc1",
    "fc2",
    "q",
    "kv",
    "fc3",
    "out_proj",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "lm_head",
]


def write_released_adapter(path: str | Path, base_model: str, rank: int = 32) -> Path:
    """``adapter_config.json`` of an RLinf LoRA adapter (RLinf's ``LoraConfig``); no weights."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "base_model_name_or_path": base_model,
        "bias": "none",
        "init_lora_weights": "gaussian",
        "lora_alpha": rank,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": rank,
        "target_modules": sorted(RLINF_LORA_TARGETS),
        "task_type": None,
    }
    (path / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path


__all__ = [
    "OPENVLA_7B_CONFIG",
    "OPENVLA_7B_INDEX_BYTES",
    "OPENVLA_7B_PARAMETERS",
    "RELEASED",
    "RLINF_LORA_TARGETS",
    "ReleasedKind",
    "released_config",
    "released_tensor_shapes",
    "write_released_adapter",
    "write_released_dir",
]
