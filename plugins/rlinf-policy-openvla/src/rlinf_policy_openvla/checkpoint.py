"""Reading and writing OpenVLA / OpenVLA-OFT checkpoint directories (Hugging Face layout).

A directory holds ``config.json`` (Prismatic fields, ``text_config``, ``n_action_bins``,
``norm_stats``), weights as ``model.safetensors`` or ``model-0000k-of-0000n.safetensors`` +
``model.safetensors.index.json``, tokenizer files, ``preprocessor_config.json`` and optionally
``dataset_statistics.json`` (merged into ``norm_stats``) and official OFT extras
(``proprio_projector--*_checkpoint.pt``). Everything is read without ``trust_remote_code``.
Weights (sharded safetensors + index) and norm stats go through core's :mod:`rlinf_core.models`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from rlinf_core.models.norm_stats import read_norm_stats
from rlinf_core.models.weights import CheckpointError, read_json
from rlinf_policy_openvla.processing import RESIZE_STRATEGIES
from rlinf_policy_openvla.vit import ACTIVATIONS, TIMM_PRESETS, ViTSpec

TINY_HINT = "create a tiny test checkpoint with `python -m rlinf_policy_openvla.make_tiny DIR`"
# ImageNet statistics as Prismatic stores them for DINOv2 (bf16-rounded); SigLIP uses 0.5 / 0.5.
DINO_MEAN, DINO_STD = (0.484375, 0.455078125, 0.40625), (0.228515625, 0.2236328125, 0.224609375)
SIGLIP_MEAN, SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)


@dataclass
class PrismaticSpec:
    """Everything needed to build the network and its preprocessing from ``config.json``."""

    vision: list[ViTSpec]
    projector: str  # "fused-gelu-mlp" | "gelu-mlp"
    text_config: dict
    pad_token_id: int
    pad_to_multiple_of: int
    n_action_bins: int
    norm_stats: dict
    image_means: list[tuple[float, float, float]]
    image_stds: list[tuple[float, float, float]]
    raw: dict = field(default_factory=dict)
    image_resize_strategy: str = "resize-naive"  # Prismatic's resize-naive | resize-crop | letterbox
    letterbox_fill: tuple[int, int, int] = (127, 127, 127)

    @property
    def vision_dim(self) -> int:
        return sum(v.width for v in self.vision)

    @cached_property
    def llama_config(self):
        """``transformers.LlamaConfig`` of ``text_config``: absent fields take LlamaConfig's defaults (Llama-2-7B),
        as in the released checkpoints, which store only ``model_type``, ``pad_token_id``, ``torch_dtype`` and
        ``vocab_size``."""
        return llama_config(self.text_config)

    @property
    def llm_dim(self) -> int:
        return int(self.llama_config.hidden_size)

    @property
    def num_patches(self) -> int:
        return self.vision[0].num_patches

    @property
    def action_vocab_size(self) -> int:
        """Text vocabulary without padding rows; the action ids are its last ``n_action_bins`` ids."""
        return int(self.llama_config.vocab_size) - self.pad_to_multiple_of


def llama_config(text_config: dict):
    """``LlamaConfig`` from a (possibly minimal) nested ``text_config``; one-line error on bad fields."""
    from transformers import LlamaConfig

    model_type = text_config.get("model_type", "llama")
    if model_type != "llama":
        raise CheckpointError(f"config.json: text_config.model_type {model_type!r} not supported; OpenVLA uses 'llama'")
    fields_ = {k: v for k, v in text_config.items() if k not in ("model_type", "architectures", "transformers_version")}
    try:
        return LlamaConfig(**fields_)
    except Exception as exc:  # noqa: BLE001 - TypeError, ValueError or huggingface_hub's StrictDataclassError
        raise CheckpointError(
            f"config.json: text_config is not a valid Llama config ({' '.join(str(exc).split())})"
        ) from None


def check_model_dir(path: str | Path) -> Path:
    """Fail with one line when ``path`` is not a model directory."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise CheckpointError(f"model_path {str(p)!r} is not a directory; {TINY_HINT}")
    if not (p / "config.json").is_file():
        if (p / "adapter_config.json").is_file():
            raise CheckpointError(
                f"model_path {str(p)!r} is a LoRA adapter directory; set model_path to the base model and"
                f" lora: {{path: {str(p)!r}}}"
            )
        raise CheckpointError(
            f"model_path {str(p)!r} has no config.json; expected an OpenVLA Hugging Face directory"
            f" (config.json, model*.safetensors, tokenizer files); {TINY_HINT}"
        )
    return p


def _vision_specs(cfg: dict) -> list[ViTSpec]:
    ids = list(cfg.get("timm_model_ids") or [])
    overrides = list(cfg.get("timm_model_configs") or [None] * len(ids))
    fused = bool(cfg.get("use_fused_vision_backbone", len(ids) > 1))
    n = 2 if fused else 1
    if len(ids) < n or len(overrides) < n:
        raise CheckpointError(f"config.json: use_fused_vision_backbone={fused} needs {n} timm_model_ids, got {ids}")
    sizes = cfg.get("image_sizes") or []
    # Prismatic passes these to timm.create_model(act_layer=...) (openvla/openvla:prismatic/extern/hf/
    # modeling_prismatic.py:83,97); null keeps the model's own activation
    acts = list(cfg.get("timm_override_act_layers") or [None] * n)
    specs = []
    for i in range(n):
        if overrides[i] is not None:
            spec = ViTSpec.from_dict(overrides[i])
        elif ids[i] in TIMM_PRESETS:
            spec = TIMM_PRESETS[ids[i]]
        else:
            raise CheckpointError(
                f"config.json: unknown vision tower {ids[i]!r}; known: {', '.join(TIMM_PRESETS)}"
                " (or give its sizes in timm_model_configs)"
            )
        if i < len(sizes) and sizes[i] != spec.image_size:
            spec = ViTSpec.from_dict({**spec.to_dict(), "image_size": int(sizes[i])})
        act = acts[i] if i < len(acts) else None
        if act is not None:
            if act not in ACTIVATIONS:
                raise CheckpointError(
                    f"config.json: timm_override_act_layers[{i}] = {act!r} not supported; "
                    f"valid: {', '.join(ACTIVATIONS)}"
                )
            spec = ViTSpec.from_dict({**spec.to_dict(), "act": act})
        specs.append(spec)
    if len({(s.image_size, s.patch_size) for s in specs}) != 1:
        raise CheckpointError("config.json: fused vision towers must share image size and patch size")
    return specs


def _image_norm(path: Path, cfg: dict, n: int) -> tuple[list, list]:
    ids = list(cfg.get("timm_model_ids") or [])
    means = [SIGLIP_MEAN if "siglip" in (ids[i] if i < len(ids) else "") else DINO_MEAN for i in range(n)]
    stds = [SIGLIP_STD if "siglip" in (ids[i] if i < len(ids) else "") else DINO_STD for i in range(n)]
    pre = path / "preprocessor_config.json"
    if pre.is_file():
        p = read_json(pre)
        if p.get("tvf_normalize_params"):
            means = [tuple(x["mean"]) for x in p["tvf_normalize_params"]][:n]
            stds = [tuple(x["std"]) for x in p["tvf_normalize_params"]][:n]
        elif p.get("means") and p.get("stds"):
            means, stds = [tuple(m) for m in p["means"]][:n], [tuple(s) for s in p["stds"]][:n]
    return means, stds


def _resize_strategy(path: Path, cfg: dict, means: list) -> tuple[str, tuple[int, int, int]]:
    """The processor's ``image_resize_strategy`` (preprocessor_config.json, else config.json) and letterbox fill.

    Prismatic fills the letterbox border with ``int(255 · mean)`` of the last tower's normalisation mean
    (openvla/openvla:prismatic/extern/hf/processing_prismatic.py:118-119); a saved ``tvf_letterbox_fill`` wins.
    """

    pre = path / "preprocessor_config.json"
    p = read_json(pre) if pre.is_file() else {}
    strategy = p.get("image_resize_strategy") or cfg.get("image_resize_strategy") or "resize-naive"
    if strategy not in RESIZE_STRATEGIES:
        raise CheckpointError(
            f"{path}: image_resize_strategy {strategy!r} not supported; valid: {', '.join(RESIZE_STRATEGIES)}"
        )
    saved = p.get("tvf_letterbox_fill")
    fill = tuple(int(v) for v in saved) if saved else tuple(int(x * 255) for x in means[-1])
    return strategy, fill


def _int(cfg: dict, key: str, default: int) -> int:
    value = cfg.get(key, default)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"config.json: {key} must be an integer, got {value!r}")
    return value


def read_spec(model_path: str | Path) -> PrismaticSpec:
    path = check_model_dir(model_path)
    cfg = read_json(path / "config.json")
    if not isinstance(cfg.get("text_config"), dict):
        raise CheckpointError(
            f"{path / 'config.json'} has no text_config (model_type={cfg.get('model_type')!r});"
            " is this an OpenVLA / Prismatic checkpoint?"
        )
    vision = _vision_specs(cfg)
    arch = str(cfg.get("arch_specifier", "no-align+fused-gelu-mlp"))
    if arch.endswith("fused-gelu-mlp"):
        projector = "fused-gelu-mlp"
    elif arch.endswith("gelu-mlp"):
        projector = "gelu-mlp"
    else:
        raise CheckpointError(
            f"config.json: arch_specifier {arch!r} not supported; use '*gelu-mlp' or '*fused-gelu-mlp'"
        )
    means, stds = _image_norm(path, cfg, len(vision))
    strategy, fill = _resize_strategy(path, cfg, means)
    spec = PrismaticSpec(
        vision=vision,
        projector=projector,
        text_config=dict(cfg["text_config"]),
        pad_token_id=_int(cfg, "pad_token_id", cfg["text_config"].get("pad_token_id", 0)),
        pad_to_multiple_of=_int(cfg, "pad_to_multiple_of", 0),
        n_action_bins=_int(cfg, "n_action_bins", 256),
        norm_stats=read_norm_stats(path, cfg),
        image_means=means,
        image_stds=stds,
        raw=cfg,
        image_resize_strategy=strategy,
        letterbox_fill=fill,
    )
    if projector == "fused-gelu-mlp" and len(vision) != 2:
        raise CheckpointError("config.json: the fused-gelu-mlp projector needs the fused (two-tower) vision backbone")
    return spec


# ---- official OFT side files -----------------------------------------------------------------------
def load_official_extra(model_path: str | Path, module: str) -> dict[str, torch.Tensor] | None:
    """Official OFT side files like ``proprio_projector--150000_checkpoint.pt`` (``module.`` stripped)."""
    files = sorted(Path(model_path).glob(f"*{module}*checkpoint*.pt"))
    if not files:
        return None
    raw = torch.load(str(files[-1]), map_location="cpu", weights_only=True)
    return {k.removeprefix("module."): v for k, v in raw.items()}


def saved_value_head_outputs(model_path: str | Path) -> int | None:
    """Rows of the last ``value_head.mlp.<i>.weight`` in a directory's safetensors (1: one value per chunk, else one
    per sub-step), read from the file headers only; None when the weights hold no value head. RLinf's exports carry
    the critic but no record of ``add_value_head``, so the weights tell. Unreadable weights also give None: the
    weight loader names what is wrong with them."""

    from safetensors import safe_open

    path = Path(model_path)
    index = path / "model.safetensors.index.json"
    last: tuple[int, int] | None = None
    try:
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map") or {}
            files = sorted({weight_map[k] for k in weight_map if str(k).startswith("value_head.")})
        else:
            files = ["model.safetensors"] if (path / "model.safetensors").is_file() else []
        for name in files:
            with safe_open(str(path / name), framework="pt") as f:
                for key in f.keys():
                    parts = key.split(".")
                    if len(parts) == 4 and parts[:2] == ["value_head", "mlp"] and parts[3] == "weight":
                        layer, rows = int(parts[2]), int(f.get_slice(key).get_shape()[0])
                        last = max(last or (layer, rows), (layer, rows))
    except Exception:  # noqa: BLE001 - a damaged file is reported, in one line, by load_weights right after
        return None
    return None if last is None else last[1]
