"""Write a tiny random OpenVLA / OpenVLA-OFT checkpoint in the real Hugging Face layout.

    python -m rlinf_policy_openvla.make_tiny DIR [--kind openvla|oft] [--norm-key KEY ...] [--action-dim 7]

The directory gets what a downloaded checkpoint has: ``config.json`` (Prismatic fields,
``text_config``, ``n_action_bins``, ``norm_stats``), sharded ``model-0000k-of-0000n.safetensors``
+ ``model.safetensors.index.json``, a locally trained Llama-style SentencePiece tokenizer
(``tokenizer.model``, ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``,
``added_tokens.json``), ``preprocessor_config.json``, ``processor_config.json``,
``generation_config.json`` and ``dataset_statistics.json``. Nothing is downloaded. Sizes are tiny
(56 px images, ViT width 32, Llama hidden 64, 2 layers), so a batch-8 predict takes milliseconds on CPU.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import torch

from rlinf_core.models.settings import CLASS_ENTRY, SETTINGS_KEY
from rlinf_core.models.weights import save_weights
from rlinf_policy_openvla.checkpoint import DINO_MEAN, DINO_STD, SIGLIP_MEAN, SIGLIP_STD, read_spec
from rlinf_policy_openvla.processing import PROMPT
from rlinf_policy_openvla.vit import TIMM_PRESETS

_CORPUS = [
    PROMPT.format(task=t)
    for t in (
        "put the black bowl on the plate",
        "pick up the alphabet soup and place it in the basket",
        "open the top drawer and put the bowl inside",
        "turn on the stove",
        "put the carrot on the plate",
        "stack the green block on the yellow block",
        "reach the red target",
        "push the puck to the goal",
        "close the door of the microwave",
        "pick up the cube and lift it",
    )
]


def build_tokenizer(
    path: Path, n_action_bins: int, pad_multiple: int, target_text_pieces: int = 400, vocab_size: int | None = None
) -> int:
    """Train a Llama-style SentencePiece BPE tokenizer (byte fallback, ``<s>``=1, ``</s>``=2) on a few
    prompts, append filler pieces so that the last ``n_action_bins`` ids of a vocabulary whose size is
    a multiple of ``pad_multiple`` (or exactly ``vocab_size``, e.g. Llama-2's 32000) are unused
    private-use characters (the action ids), add ``<PAD>`` after it and write the tokenizer files.
    Returns the base vocabulary size."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import LlamaTokenizer

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_CORPUS * 8),
        model_writer=buf,
        vocab_size=target_text_pieces,
        model_type="bpe",
        byte_fallback=True,
        hard_vocab_limit=False,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        split_digits=True,
        num_threads=1,
        minloglevel=2,
    )
    proto = pb.ModelProto()
    proto.ParseFromString(buf.getvalue())
    multiple = max(pad_multiple, 1)
    vocab = vocab_size or -(-(len(proto.pieces) + n_action_bins) // multiple) * multiple
    if vocab < len(proto.pieces) + n_action_bins:
        raise ValueError(f"vocab_size {vocab} leaves no room for {n_action_bins} action ids after the text pieces")
    fillers = vocab - len(proto.pieces)
    base = 0xE000 if fillers <= 0x1900 else 0xF0000  # private-use characters: never produced by prompts
    for i in range(fillers):
        piece = proto.pieces.add()
        piece.piece = chr(base + i)
        piece.score = -1e4 - i
        piece.type = pb.ModelProto.SentencePiece.NORMAL
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.model").write_bytes(proto.SerializeToString())
    tok = LlamaTokenizer.from_pretrained(str(path))
    tok.add_special_tokens({"pad_token": "<PAD>"})
    tok.save_pretrained(str(path))
    specials = {
        "bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
        "eos_token": {"content": "</s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
        "pad_token": "<PAD>",
        "unk_token": {"content": "<unk>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
    }
    (path / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    (path / "added_tokens.json").write_text(json.dumps({"<PAD>": vocab}, indent=2) + "\n")
    return vocab


def _norm_stats(keys: list[str], action_dim: int, proprio_dim: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    stats = {}
    for key in keys:
        mask = [True] * action_dim
        if action_dim >= 7:
            mask[-1] = False  # gripper stays in [-1, 1] (OpenVLA convention)
        # bounds around [-1, 1], slightly perturbed so that un-normalisation is not the identity
        q01 = (-1.0 + 0.05 * torch.rand(action_dim, generator=gen)).tolist()
        q99 = (1.0 - 0.05 * torch.rand(action_dim, generator=gen)).tolist()
        entry = {
            "action": {
                "mean": [0.0] * action_dim,
                "std": [0.5] * action_dim,
                "min": [-1.0] * action_dim,
                "max": [1.0] * action_dim,
                "q01": q01,
                "q99": q99,
                "mask": mask,
            },
            "num_transitions": 1000,
            "num_trajectories": 10,
        }
        if proprio_dim:
            entry["proprio"] = {
                "mean": [0.0] * proprio_dim,
                "std": [1.0] * proprio_dim,
                "min": [-2.0] * proprio_dim,
                "max": [2.0] * proprio_dim,
                "q01": [-2.0] * proprio_dim,
                "q99": [2.0] * proprio_dim,
            }
        stats[key] = entry
    return stats


def write_side_files(path: Path, pad_token_id: int, image_size: int) -> None:
    """``generation_config.json``, ``preprocessor_config.json``, ``processor_config.json`` as Prismatic writes them."""
    (path / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": pad_token_id}, indent=2) + "\n"
    )
    resize = {"antialias": True, "interpolation": 3, "max_size": None, "size": [image_size, image_size]}
    (path / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "PrismaticImageProcessor",
                "processor_class": "PrismaticProcessor",
                "image_resize_strategy": "resize-naive",
                "input_sizes": [[3, image_size, image_size]] * 2,
                "interpolations": ["bicubic", "bicubic"],
                "means": [list(DINO_MEAN), list(SIGLIP_MEAN)],
                "stds": [list(DINO_STD), list(SIGLIP_STD)],
                "tvf_crop_params": [{"output_size": [image_size, image_size]}] * 2,
                "tvf_do_letterbox": False,
                "tvf_letterbox_fill": None,
                "tvf_normalize_params": [
                    {"inplace": False, "mean": list(DINO_MEAN), "std": list(DINO_STD)},
                    {"inplace": False, "mean": list(SIGLIP_MEAN), "std": list(SIGLIP_STD)},
                ],
                "tvf_resize_params": [resize, resize],
                "use_fused_vision_backbone": True,
            },
            indent=2,
        )
        + "\n"
    )
    (path / "processor_config.json").write_text(json.dumps({"processor_class": "PrismaticProcessor"}, indent=2) + "\n")


def make_tiny(
    path: str | Path,
    *,
    kind: str = "oft",
    norm_keys: tuple[str, ...] | list[str] = ("libero_spatial_no_noops",),
    action_dim: int = 7,
    num_action_chunks: int | None = None,
    image_size: int = 56,
    patch_size: int = 14,
    vision_width: int = 32,
    vision_depth: int = 2,
    vision_heads: int = 2,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 128,
    n_action_bins: int = 256,
    pad_to_multiple_of: int = 64,
    proprio_dim: int = 0,
    norm_stats: dict | None = None,
    num_shards: int = 2,
    seed: int = 0,
) -> Path:
    """Write a tiny random checkpoint to ``path`` and return it.

    Args:
        path: output directory (created).
        kind: ``oft`` (remembers ``num_action_chunks`` 8 by default) or ``openvla`` (1).
        norm_keys: datasets in ``norm_stats`` (the first also goes to ``dataset_statistics.json``).
        action_dim: action dimensions in the norm stats (7 for LIBERO/ManiSkill, 4 for MetaWorld, 2 for ReachEnv).
        num_action_chunks: chunk size stored as the checkpoint's default (None: 8 for oft, 1 for openvla).
        image_size: vision input size (multiple of ``patch_size``).
        patch_size: ViT patch size.
        vision_width: width of each ViT tower.
        vision_depth: blocks per ViT tower (>= 2; features come from the second-to-last).
        vision_heads: attention heads per ViT tower.
        hidden_size: Llama hidden size.
        num_layers: Llama layers.
        num_heads: Llama attention heads.
        intermediate_size: Llama MLP size.
        n_action_bins: action bins (the last ids of the text vocabulary).
        pad_to_multiple_of: embedding rows are padded to this multiple (Prismatic: 64).
        proprio_dim: > 0 adds proprio statistics and an OFT proprio projector.
        norm_stats: explicit ``norm_stats`` (overrides ``norm_keys`` / ``action_dim``).
        num_shards: about this many safetensors shards (at most; 1 writes a single ``model.safetensors``).
        seed: seed of the random weights and statistics.
    """
    if kind not in ("oft", "openvla"):
        raise ValueError(f"kind must be 'oft' or 'openvla', got {kind!r}")
    path = Path(path)
    vocab = build_tokenizer(path, n_action_bins, pad_to_multiple_of)
    stats = norm_stats or _norm_stats(list(norm_keys), action_dim, proprio_dim, seed)
    # the released form (transformers' diff against LlamaConfig defaults = Llama-2-7B) plus the tiny sizes
    text_config = {
        "model_type": "llama",
        "pad_token_id": vocab,
        "torch_dtype": "float32",
        "vocab_size": vocab + pad_to_multiple_of,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
    }
    tower = {
        "image_size": image_size,
        "patch_size": patch_size,
        "width": vision_width,
        "depth": vision_depth,
        "heads": vision_heads,
        "mlp_dim": 4 * vision_width,
    }
    dino = {
        **tower,
        "num_reg_tokens": 4,
        "class_token": True,
        "layer_scale": True,
        "act": TIMM_PRESETS["vit_large_patch14_reg4_dinov2.lvd142m"].act,
    }
    siglip = {
        **tower,
        "class_token": False,
        "act": TIMM_PRESETS["vit_so400m_patch14_siglip_224"].act,
        "attn_pool": True,
    }
    chunks = num_action_chunks or (8 if kind == "oft" else 1)
    config = {
        "architectures": ["OpenVLAForActionPrediction"],
        "model_type": "openvla",
        "vision_backbone_id": "dinosiglip-vit-so-tiny",
        "llm_backbone_id": "llama2-tiny-pure",
        "arch_specifier": "no-align+fused-gelu-mlp",
        "use_fused_vision_backbone": True,
        "image_resize_strategy": "resize-naive",
        "image_sizes": [image_size, image_size],
        "timm_model_ids": ["vit_tiny_patch14_reg4_dinov2", "vit_tiny_patch14_siglip"],
        "timm_model_configs": [dino, siglip],
        "timm_override_act_layers": [None, None],
        "hf_llm_id": "tiny-llama",
        "llm_max_length": 2048,
        "output_projector_states": False,
        "pad_token_id": vocab,
        "pad_to_multiple_of": pad_to_multiple_of,
        "n_action_bins": n_action_bins,
        "norm_stats": stats,
        "text_config": text_config,
        "torch_dtype": "float32",
        SETTINGS_KEY: {
            CLASS_ENTRY: "OpenVLAOFTPolicy" if kind == "oft" else "OpenVLAPolicy",
            "actions": {"num_action_chunks": chunks},
            # rlinf's own record (a tiny model is trained by rlinf, which feeds it tensors): how images are
            # resized is stated, not guessed from the processor file beside it
            "inputs": {"use_proprio": bool(proprio_dim), "proprio_dim": proprio_dim or None, "image_resize": "tensor"},
        },
    }
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_side_files(path, vocab, image_size)
    first = next(iter(stats))
    (path / "dataset_statistics.json").write_text(json.dumps({first: stats[first]}, indent=2) + "\n")

    from rlinf_policy_openvla._modeling import build_vla

    torch.manual_seed(seed)
    vla = build_vla(read_spec(path), proprio_dim=proprio_dim or None)
    save_weights(vla.state_dict(), path, num_shards=max(num_shards, 1))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rlinf openvla-make-tiny", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="output directory")
    parser.add_argument("--kind", choices=["oft", "openvla"], default="oft")
    parser.add_argument("--norm-key", action="append", dest="norm_keys", help="norm_stats dataset key (repeatable)")
    parser.add_argument("--action-dim", type=int, default=7)
    parser.add_argument("--num-action-chunks", type=int, default=None)
    parser.add_argument("--image-size", type=int, default=56)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--proprio-dim", type=int, default=0)
    parser.add_argument("--num-shards", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = make_tiny(
        args.path,
        kind=args.kind,
        norm_keys=args.norm_keys or ["libero_spatial_no_noops"],
        action_dim=args.action_dim,
        num_action_chunks=args.num_action_chunks,
        image_size=args.image_size,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        proprio_dim=args.proprio_dim,
        num_shards=args.num_shards,
        seed=args.seed,
    )
    print(f"wrote tiny {args.kind} checkpoint to {out}")


if __name__ == "__main__":
    main()
