"""The released π0 / π0.5 checkpoints as data, and weightless released-form directories for meta-device tests.

:data:`RELEASED` names each checkpoint family a user downloads: openpi's PyTorch conversions of ``pi0_base`` /
``pi05_base`` (``examples/convert_jax_model_to_pytorch.py``), lerobot's ``lerobot/pi0_base`` /
``lerobot/pi05_base`` and RLinf's SFT checkpoints used by RLinf's MetaWorld / LIBERO recipes, with the
openpi train config RLinf pairs them with (``rlinf/models/embodiment/openpi/dataconfig``: action horizon,
asset id of the statistics, ``discrete_state_input``).

:func:`released_tensor_shapes` lists the tensors of a released ``model.safetensors``, written from the published
architecture independently of :mod:`rlinf_policy_openpi._modeling`: SigLIP So400m/14 at 224 px (1152 wide,
27 layers, MLP 4304, no pooling head), a linear projector to 2048, Gemma-2B (2048 wide, 18 layers, MLP 16384,
8 query heads / 1 KV head of 256, vocabulary 257152, ``lm_head`` stored, tied ``embed_tokens`` not stored), the
Gemma-300M expert (1024 wide, MLP 4096, same heads) with its unused ``lm_head``, and the flow-matching
projections. :func:`write_released_dir` writes such a directory with a *sparse* ``model.safetensors`` (real
header, zero-filled holes: no disk space) so that a build under :func:`rlinf_core.models.meta.meta_init` reads
exactly the header a download has.

Parameter counts (derived here, asserted by the tests): π0 builds 3,238,048,528 parameters = PaliGemma
2,923,335,408 (SigLIP 412,442,352 + projector 2,361,344 + Gemma-2B 2,508,531,712) + expert 311,464,960
(openpi's "311M params") + projections 3,248,160; the file holds 3,501,372,176 (with the unused expert
``lm_head``, 263,323,648). π0.5 builds 3,353,433,872 (adaRMS ``dense`` layers instead of norm weights, time MLP
instead of state / action-time MLPs). The π0 paper's "3.3 B" is its nominal 3 B PaliGemma + 300 M expert.

The RLinf directories' exact file lists and ``config.json`` are **[unverified]** (inferred from RLinf's loader:
every ``*.safetensors`` + ``<asset_id>/norm_stats.json``); statistics values written here are placeholders.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from rlinf_policy_openpi.checkpoint import NormStats, write_norm_stats
from rlinf_policy_openpi.config import PALIGEMMA_VOCAB
from rlinf_policy_openpi.make_tiny import build_tokenizer
from rlinf_policy_openpi.transforms import TOKENIZER_FILE

PI0_PARAMETERS = 3_238_048_528
PI05_PARAMETERS = 3_353_433_872
PI0_FILE_PARAMETERS = 3_501_372_176
EXPERT_LM_HEAD_PARAMETERS = 257_152 * 1024
_TOKENIZER: list[bytes] = []
_PG = "paligemma_with_expert.paligemma"
_EX = "paligemma_with_expert.gemma_expert"


@dataclass(frozen=True)
class ReleasedModel:
    """One released checkpoint.

    Args:
        repo: where it is published.
        layout: ``openpi`` | ``lerobot`` | ``rlinf`` (see :mod:`rlinf_policy_openpi.checkpoint`).
        pi05: π0.5.
        action_horizon: H of its train config.
        asset_id: statistics' asset id (None: base models ship no statistics for our envs).
        state_dim: state dimensions of its statistics.
        action_dim: env action dimensions of its statistics.
        config_name: openpi / RLinf train config it is paired with.
        discrete_state_input: π0.5 prompt format of that config.
    """

    repo: str
    layout: str
    pi05: bool
    action_horizon: int = 50
    asset_id: str | None = None
    state_dim: int = 8
    action_dim: int = 7
    config_name: str | None = None
    discrete_state_input: bool | None = None


RELEASED: dict[str, ReleasedModel] = {
    "pi0_base": ReleasedModel("gs://openpi-assets/checkpoints/pi0_base (converted to PyTorch)", "openpi", False),
    "pi05_base": ReleasedModel("gs://openpi-assets/checkpoints/pi05_base (converted to PyTorch)", "openpi", True),
    "lerobot/pi0_base": ReleasedModel("https://huggingface.co/lerobot/pi0_base", "lerobot", False),
    "lerobot/pi05_base": ReleasedModel("https://huggingface.co/lerobot/pi05_base", "lerobot", True),
    "RLinf-Pi0-MetaWorld-SFT": ReleasedModel(
        "https://huggingface.co/RLinf/RLinf-Pi0-MetaWorld-SFT",
        "rlinf",
        False,
        5,
        "lerobot/metaworld_mt50",
        4,
        4,
        "pi0_metaworld",
    ),
    "RLinf-Pi05-MetaWorld-SFT": ReleasedModel(
        "https://huggingface.co/RLinf/RLinf-Pi05-MetaWorld-SFT",
        "rlinf",
        True,
        5,
        "lerobot/metaworld_mt50",
        4,
        4,
        "pi05_metaworld",
        False,
    ),
    "RLinf-Pi0-LIBERO-Spatial-Object-Goal-SFT": ReleasedModel(
        "https://huggingface.co/RLinf/RLinf-Pi0-LIBERO-Spatial-Object-Goal-SFT",
        "rlinf",
        False,
        50,
        "physical-intelligence/libero",
        8,
        7,
        "pi0_libero",
    ),
    "RLinf-Pi05-LIBERO-SFT": ReleasedModel(
        "https://huggingface.co/RLinf/RLinf-Pi05-LIBERO-SFT",
        "rlinf",
        True,
        10,
        "physical-intelligence/libero",
        8,
        7,
        "pi05_libero",
        False,
    ),
}


def _gemma_layers(prefix: str, width: int, mlp: int, adarms: bool) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    q, kv = 8 * 256, 1 * 256
    for i in range(18):
        layer = f"{prefix}.layers.{i}"
        out[f"{layer}.self_attn.q_proj.weight"] = (q, width)
        out[f"{layer}.self_attn.k_proj.weight"] = (kv, width)
        out[f"{layer}.self_attn.v_proj.weight"] = (kv, width)
        out[f"{layer}.self_attn.o_proj.weight"] = (width, q)
        out[f"{layer}.mlp.gate_proj.weight"] = out[f"{layer}.mlp.up_proj.weight"] = (mlp, width)
        out[f"{layer}.mlp.down_proj.weight"] = (width, mlp)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out.update(_norm(f"{layer}.{norm}", width, adarms))
    out.update(_norm(f"{prefix}.norm", width, adarms))
    return out


def _norm(name: str, width: int, adarms: bool) -> dict[str, tuple[int, ...]]:
    if adarms:  # π0.5 expert: (scale, shift, gate) from the 1024-wide time condition, no weight
        return {f"{name}.dense.weight": (3 * width, width), f"{name}.dense.bias": (3 * width,)}
    return {f"{name}.weight": (width,)}


def released_tensor_shapes(pi05: bool, layout: str = "openpi") -> dict[str, tuple[int, ...]]:
    """Names and shapes of a released ``model.safetensors`` (``layout`` lerobot: transformers 5 SigLIP names)."""
    vis = f"{_PG}.model.vision_tower.vision_model"
    out: dict[str, tuple[int, ...]] = {
        f"{vis}.embeddings.patch_embedding.weight": (1152, 3, 14, 14),
        f"{vis}.embeddings.patch_embedding.bias": (1152,),
        f"{vis}.embeddings.position_embedding.weight": (256, 1152),
        f"{vis}.post_layernorm.weight": (1152,),
        f"{vis}.post_layernorm.bias": (1152,),
    }
    for i in range(27):
        layer = f"{vis}.encoder.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{layer}.self_attn.{proj}.weight"], out[f"{layer}.self_attn.{proj}.bias"] = (1152, 1152), (1152,)
        for ln in ("layer_norm1", "layer_norm2"):
            out[f"{layer}.{ln}.weight"] = out[f"{layer}.{ln}.bias"] = (1152,)
        out[f"{layer}.mlp.fc1.weight"], out[f"{layer}.mlp.fc1.bias"] = (4304, 1152), (4304,)
        out[f"{layer}.mlp.fc2.weight"], out[f"{layer}.mlp.fc2.bias"] = (1152, 4304), (1152,)
    out[f"{_PG}.model.multi_modal_projector.linear.weight"] = (2048, 1152)
    out[f"{_PG}.model.multi_modal_projector.linear.bias"] = (2048,)
    out.update(_gemma_layers(f"{_PG}.model.language_model", 2048, 16384, adarms=False))
    out[f"{_PG}.lm_head.weight"] = (257152, 2048)
    out.update(_gemma_layers(f"{_EX}.model", 1024, 4096, adarms=pi05))
    out[f"{_EX}.lm_head.weight"] = (257152, 1024)
    out["action_in_proj.weight"], out["action_in_proj.bias"] = (1024, 32), (1024,)
    out["action_out_proj.weight"], out["action_out_proj.bias"] = (32, 1024), (32,)
    if pi05:
        for name in ("time_mlp_in", "time_mlp_out"):
            out[f"{name}.weight"], out[f"{name}.bias"] = (1024, 1024), (1024,)
    else:
        out["state_proj.weight"], out["state_proj.bias"] = (1024, 32), (1024,)
        out["action_time_mlp_in.weight"], out["action_time_mlp_in.bias"] = (1024, 2048), (1024,)
        out["action_time_mlp_out.weight"], out["action_time_mlp_out.bias"] = (1024, 1024), (1024,)
    if layout == "lerobot":
        out = {k.replace(".vision_tower.vision_model.", ".vision_tower."): v for k, v in out.items()}
    return out


def write_sparse_safetensors(path: str | Path, shapes: dict[str, tuple[int, ...]], dtype: str = "BF16") -> Path:
    """A ``.safetensors`` file with a real header for ``shapes`` and a zero-filled sparse data region."""
    itemsize = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(shapes):
        n = itemsize
        for s in shapes[name]:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shapes[name]), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = Path(path)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)  # a hole: no blocks are written
    return path


def released_config(name: str) -> dict:
    """``config.json`` of a released checkpoint (openpi's minimal form, or lerobot's ``type`` form)."""
    spec = _spec(name)
    if spec.layout == "lerobot":
        return {
            "type": "pi05" if spec.pi05 else "pi0",
            "paligemma_variant": "gemma_2b",
            "action_expert_variant": "gemma_300m",
            "dtype": "float32",
            "chunk_size": spec.action_horizon,
            "n_action_steps": spec.action_horizon,
            "max_state_dim": 32,
            "max_action_dim": 32,
            "num_inference_steps": 10,
            "tokenizer_max_length": 200 if spec.pi05 else 48,
        }
    return {
        "action_dim": 32,
        "action_horizon": spec.action_horizon,
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "precision": "bfloat16",
    }


def _spec(name: str) -> ReleasedModel:
    if name not in RELEASED:
        raise ValueError(f"unknown released checkpoint {name!r}; known: {', '.join(RELEASED)}")
    return RELEASED[name]


def write_released_standin(model_path: str | Path, directory: str | Path) -> Path | None:
    """A weightless released-form directory under ``directory`` for the checkpoint a placeholder ``model_path``
    names by its last component (``/path/to/RLinf-Pi0-MetaWorld-SFT``), else None (for ``rlinf memory``)."""
    name = Path(str(model_path)).name
    if name not in RELEASED:
        return None
    return write_released_dir(Path(directory) / name, name)


def write_released_dir(path: str | Path, name: str, tokenizer: bool = True) -> Path:
    """Write a weightless directory in the layout of released checkpoint ``name`` (see :data:`RELEASED`).

    ``tokenizer``: also write a ``paligemma_tokenizer.model`` with PaliGemma's 257152 pieces next to the weights,
    where a user copies it (released directories do not ship it: openpi keeps it in its cache).
    """
    spec = _spec(name)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if tokenizer:
        if not _TOKENIZER:  # ~1 s to build: once per process
            build_tokenizer(path, pad_to=PALIGEMMA_VOCAB)
            _TOKENIZER.append((path / TOKENIZER_FILE).read_bytes())
        (path / TOKENIZER_FILE).write_bytes(_TOKENIZER[0])
    (path / "config.json").write_text(json.dumps(released_config(name), indent=2) + "\n")
    shapes = released_tensor_shapes(spec.pi05, spec.layout)
    write_sparse_safetensors(path / "model.safetensors", shapes, "F32" if spec.layout == "lerobot" else "BF16")
    if spec.asset_id is not None:

        def placeholder(d: int) -> NormStats:
            return NormStats(mean=torch.zeros(d), std=torch.ones(d), q01=-torch.ones(d), q99=torch.ones(d))

        stats = {"state": placeholder(spec.state_dim), "actions": placeholder(spec.action_dim)}
        write_norm_stats(path / spec.asset_id if spec.layout == "rlinf" else path / "assets" / spec.asset_id, stats)
    return path


__all__ = [
    "EXPERT_LM_HEAD_PARAMETERS",
    "PI05_PARAMETERS",
    "PI0_FILE_PARAMETERS",
    "PI0_PARAMETERS",
    "RELEASED",
    "ReleasedModel",
    "released_config",
    "released_tensor_shapes",
    "write_released_dir",
    "write_sparse_safetensors",
]
