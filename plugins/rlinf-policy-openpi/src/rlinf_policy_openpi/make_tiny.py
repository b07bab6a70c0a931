"""Write a tiny random π0 / π0.5 checkpoint in one of the three real layouts.

    python -m rlinf_policy_openpi.make_tiny DIR [--pi05] [--layout openpi|lerobot|rlinf]

Files, as a downloaded checkpoint has them (see :mod:`rlinf_policy_openpi.checkpoint`):

- ``openpi``: ``model.safetensors`` (openpi names, tied ``embed_tokens`` dropped, the unused expert ``lm_head``
  kept), minimal ``config.json`` (+ the size extras a tiny model needs), ``assets/<asset_id>/norm_stats.json``;
- ``lerobot``: ``model.safetensors`` with transformers 5 SigLIP names (``vision_tower.*``), ``config.json`` with
  ``type: pi0|pi05``, ``policy_preprocessor_step_3_normalizer_processor.safetensors``;
- ``rlinf``: the weights split over two ``*.safetensors`` without index (RLinf reads every file) with a
  ``value_head.*``, ``config.json`` in openpi form and ``<asset_id>/norm_stats.json``.

Every layout also gets ``paligemma_tokenizer.model``: a SentencePiece model trained here on robot prompts with
PaliGemma's special ids (pad 0, eos 1, bos 2, unk 3). Sizes: openpi's ``dummy`` Gemma (64 wide, 8 heads,
1 KV head, head_dim 16) at depth 2 for both stacks, SigLIP 32 wide / 2 layers / patch 14 at 28 px (4 tokens per
camera), H = 5. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import torch

from rlinf_core.models.weights import save_weights
from rlinf_policy_openpi.checkpoint import UNUSED_KEYS, NormStats, write_norm_stats
from rlinf_policy_openpi.config import GemmaDims, OpenPIConfig, SiglipDims, variant_dims
from rlinf_policy_openpi.transforms import TOKENIZER_FILE

LAYOUTS = ("openpi", "lerobot", "rlinf")
DEFAULT_ASSET_ID = "lerobot/metaworld_mt50"
VALUE_HEAD_HIDDEN = (512, 256, 128)  # RLinf's openpi ValueHead (π0 / MetaWorld)
_PROMPTS = (
    "reach the goal",
    "push the puck to the goal",
    "pick up the puck and place it at the goal",
    "open the door",
    "close the drawer",
    "press the button from the top",
    "insert the peg into the hole",
    "open the window",
    "close the window",
    "open the drawer",
    "turn the faucet on",
    "sweep the puck into the hole",
    "put the black bowl on the plate",
    "pick up the alphabet soup and place it in the basket",
    "turn on the stove",
    "stack the green block on the yellow block",
    "reach the red target",
    "pick up the cube and lift it",
    "put the carrot on the plate",
    "close the microwave door",
)


def build_tokenizer(path: Path, vocab_size: int = 320, pad_to: int | None = None) -> int:
    """Train a PaliGemma-like SentencePiece BPE tokenizer (byte fallback, digits split, pad 0 / eos 1 / bos 2 /
    unk 3) on robot prompts and write ``path/paligemma_tokenizer.model``. ``pad_to`` appends never-produced
    ``<unusedN>`` pieces up to that size (PaliGemma's 257152 for released-form directories). Returns the size."""
    import sentencepiece as spm

    corpus = [p for p in _PROMPTS] + [f"Task: {p}, State: 12 250 3 77;\nAction: " for p in _PROMPTS]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus * 4),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        hard_vocab_limit=False,
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        split_digits=True,
        allow_whitespace_only_pieces=True,
        num_threads=1,
        minloglevel=2,
    )
    data = buf.getvalue()
    if pad_to is not None:
        from sentencepiece import sentencepiece_model_pb2 as pb

        proto = pb.ModelProto()
        proto.ParseFromString(data)
        for i in range(pad_to - len(proto.pieces)):
            piece = proto.pieces.add()
            piece.piece, piece.score, piece.type = f"<unused{i}>", 0.0, pb.ModelProto.SentencePiece.UNUSED
        data = proto.SerializeToString()
    path.mkdir(parents=True, exist_ok=True)
    (path / TOKENIZER_FILE).write_bytes(data)
    return int(spm.SentencePieceProcessor(model_proto=data).get_piece_size())


def tiny_norm_stats(state_dim: int, action_dim: int, seed: int) -> dict[str, NormStats]:
    """Perturbed statistics (so normalisation is never the identity) with q01 < mean < q99."""
    gen = torch.Generator().manual_seed(seed)

    def one(d: int) -> NormStats:
        mean = 0.1 * torch.randn(d, generator=gen)
        std = 0.5 + 0.5 * torch.rand(d, generator=gen)
        return NormStats(mean=mean, std=std, q01=mean - 2 * std, q99=mean + 2 * std)

    return {"state": one(state_dim), "actions": one(action_dim)}


def tiny_config(
    pi05: bool,
    vocab_size: int,
    *,
    action_horizon: int = 5,
    depth: int = 2,
    image_size: int = 28,
    max_token_len: int | None = None,
) -> OpenPIConfig:
    dims: GemmaDims = variant_dims("dummy", {"depth": depth})
    return OpenPIConfig(
        pi05=pi05,
        action_horizon=action_horizon,
        max_token_len=max_token_len,
        paligemma_variant="dummy",
        action_expert_variant="dummy",
        vlm=dims,
        expert=dims,
        vision=SiglipDims(width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=14, image_size=image_size),
        vocab_size=vocab_size,
        precision="float32",
    )


def _lerobot_config(config: OpenPIConfig) -> dict:
    """lerobot ``PI0Config`` / ``PI05Config`` fields that matter here (their dataclass writes many more)."""
    return {
        "type": "pi05" if config.pi05 else "pi0",
        "paligemma_variant": config.paligemma_variant,
        "action_expert_variant": config.action_expert_variant,
        "dtype": config.precision,
        "n_obs_steps": 1,
        "chunk_size": config.action_horizon,
        "n_action_steps": config.action_horizon,
        "max_state_dim": config.action_dim,
        "max_action_dim": config.action_dim,
        "num_inference_steps": 10,
        "tokenizer_max_length": config.max_token_len,
        "image_resolution": [config.vision.image_size, config.vision.image_size],
        # not read by lerobot: sizes of the tiny stacks (lerobot only knows the named variants)
        "dims": config.to_json().get("dims", {}),
        "vocab_size": config.vocab_size,
    }


def make_tiny(
    path: str | Path,
    *,
    pi05: bool = False,
    layout: str = "openpi",
    action_horizon: int = 5,
    state_dim: int = 4,
    action_dim: int = 4,
    asset_id: str = DEFAULT_ASSET_ID,
    depth: int = 2,
    image_size: int = 28,
    max_token_len: int | None = None,
    value_head: bool | None = None,
    seed: int = 0,
) -> Path:
    """Write a tiny random checkpoint to ``path`` and return it.

    Args:
        path: output directory (created).
        pi05: π0.5 (adaRMS expert, quantile statistics) instead of π0.
        layout: ``openpi`` | ``lerobot`` | ``rlinf`` (see the module docstring).
        action_horizon: H, action tokens per chunk.
        state_dim: state dimensions in the statistics (MetaWorld 4); the model pads to 32.
        action_dim: action dimensions in the statistics (MetaWorld 4).
        asset_id: dataset asset id of the statistics (may contain a slash).
        depth: layers of both Gemma stacks.
        image_size: SigLIP input size (multiple of 14).
        max_token_len: prompt length (None: openpi's 48 / 200).
        value_head: add RLinf ``value_head.*`` weights (None: only for the ``rlinf`` layout).
        seed: seed of weights and statistics.
    """

    from rlinf_policy_openpi._gemma_layers import AdaRMSNorm
    from rlinf_policy_openpi._modeling import OpenPIModel

    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    path = Path(path)
    vocab = build_tokenizer(path)
    config = tiny_config(
        pi05, vocab, action_horizon=action_horizon, depth=depth, image_size=image_size, max_token_len=max_token_len
    )
    torch.manual_seed(seed)
    model = OpenPIModel(config)
    for module in model.modules():  # random modulation so that π0.5's time conditioning matters in tests
        if isinstance(module, AdaRMSNorm):
            torch.nn.init.normal_(module.dense.weight, std=0.02)
    state = model.released_state_dict()
    state[UNUSED_KEYS[0]] = 0.02 * torch.randn(config.vocab_size, config.expert_width)  # as released files have it
    if value_head if value_head is not None else layout == "rlinf":
        d = config.vlm_width if pi05 else config.expert_width  # π0.5: value after the VLM
        for i, (n_in, n_out) in enumerate(zip((d, *VALUE_HEAD_HIDDEN), (*VALUE_HEAD_HIDDEN, 1))):
            state[f"value_head.mlp.{2 * i}.weight"] = torch.randn(n_out, n_in) / n_in**0.5
            state[f"value_head.mlp.{2 * i}.bias"] = torch.zeros(n_out)
    stats = tiny_norm_stats(state_dim, action_dim, seed)
    if layout == "openpi":
        save_weights(state, path)
        (path / "config.json").write_text(json.dumps(config.to_json(), indent=2) + "\n")
        write_norm_stats(path / "assets" / asset_id, stats)
    elif layout == "lerobot":
        flat = {k.replace(".vision_tower.vision_model.", ".vision_tower."): v for k, v in state.items()}
        save_weights(flat, path)
        (path / "config.json").write_text(json.dumps(_lerobot_config(config), indent=2) + "\n")
        from safetensors.torch import save_file

        tensors = {}
        for ours, theirs in (("state", "observation.state"), ("actions", "action")):
            for k in ("mean", "std", "q01", "q99"):
                tensors[f"{theirs}.{k}"] = getattr(stats[ours], k).contiguous()
        save_file(tensors, str(path / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    else:
        from safetensors.torch import save_file

        keys = list(state)
        half = len(keys) // 2
        for i, part in enumerate((keys[:half], keys[half:])):
            save_file(
                {k: state[k].contiguous() for k in part},
                str(path / f"model-{i + 1:05d}-of-00002.safetensors"),
                metadata={"format": "pt"},
            )
        (path / "config.json").write_text(json.dumps(config.to_json(), indent=2) + "\n")
        write_norm_stats(path / asset_id, stats)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rlinf openpi-make-tiny", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="output directory")
    parser.add_argument("--pi05", action="store_true", help="π0.5 instead of π0")
    parser.add_argument("--layout", choices=LAYOUTS, default="openpi")
    parser.add_argument("--action-horizon", type=int, default=5)
    parser.add_argument("--state-dim", type=int, default=4)
    parser.add_argument("--action-dim", type=int, default=4)
    parser.add_argument("--asset-id", default=DEFAULT_ASSET_ID)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=28)
    parser.add_argument("--max-token-len", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = make_tiny(
        args.path,
        pi05=args.pi05,
        layout=args.layout,
        action_horizon=args.action_horizon,
        state_dim=args.state_dim,
        action_dim=args.action_dim,
        asset_id=args.asset_id,
        depth=args.depth,
        image_size=args.image_size,
        max_token_len=args.max_token_len,
        seed=args.seed,
    )
    print(f"wrote tiny {'π0.5' if args.pi05 else 'π0'} checkpoint ({args.layout} layout) to {out}")


if __name__ == "__main__":
    main()
