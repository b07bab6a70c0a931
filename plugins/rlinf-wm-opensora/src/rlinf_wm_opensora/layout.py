"""What a world-model directory holds: the STDiT3 sizes and the weight files, in either layout.

- The Hugging Face release (``RLinf/RLinf-OpenSora-LIBERO-*``): ``config.json`` and ``model-00001.safetensors`` +
  ``model.safetensors.index.json``.
- RLinf's own loader (RLinf v0.3 examples/embodiment/config/env/opensora_libero_spatial.yaml, ``world_model_cfg.model``)
  reads only ``model-00001.safetensors`` and takes the sizes from its YAML: ``type: STDiT3-XL/2`` (depth 28,
  hidden 1152, 16 heads, patch (1, 2, 2): RLinf/opensora opensora/models/stdit/stdit3.py:530-553) with
  ``qk_norm``, ``action_dim`` and ``pad_action_num``. A directory without ``config.json`` or the index loads too.
- A training checkpoint of the RLinf/opensora fork (``epoch*-global_step*/``, written by
  ``opensora/utils/ckpt_utils.py:CheckpointIO.save``): ``model/`` (colossalai's ``Booster.save_model``: ``config.json``,
  ``model.safetensors.index.json``, ``model-00001.safetensors``, bf16), ``ema.pt`` (the float32 EMA, ``torch.save``
  of a state dict) and ``running_states.json``; no VAE, no statistics. The fork's own inference
  (``config/val_config.yaml``) loads ``ema.pt``.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from rlinf_core.models.weights import (
    INDEX_NAME,
    SINGLE_NAME,
    CheckpointError,
    load_pth_state_dict,
    load_safetensors,
    load_weights,
)
from rlinf_wm_opensora._modeling import STDiT3Config
from rlinf_wm_opensora.released import RELEASED_CONFIG

CONFIG_NAME = "config.json"
#: shards found by name when there is no index: ``model-00001.safetensors``, ``model-00001-of-00002.safetensors``
SHARD_PATTERN = re.compile(r"model-\d+(-of-\d+)?\.safetensors")
#: a training checkpoint of the RLinf/opensora fork: these beside ``model/`` and / or ``ema.pt``
RUNNING_STATES = "running_states.json"
EMA_NAME = "ema.pt"
TRAINING_MODEL_DIR = "model"
DIT_WEIGHTS = ("ema", "model")


def is_training_checkpoint(root: Path) -> bool:
    """``root`` is an ``epoch*-global_step*/`` directory of the fork's trainer (``running_states.json`` beside
    ``model/`` or ``ema.pt``)."""
    return (root / RUNNING_STATES).is_file() and ((root / TRAINING_MODEL_DIR).is_dir() or (root / EMA_NAME).is_file())


def resolve_dit_config(root: Path, overrides: dict[str, Any] | None) -> tuple[STDiT3Config, dict[str, Any], str]:
    """``(config, raw fields, where they came from)``: ``config.json`` if present, else the released STDiT3-XL/2
    sizes updated by ``overrides`` (the fields RLinf's YAML passes).

    Raises:
        ValueError: ``overrides`` next to a ``config.json`` (which one counts would be ambiguous), or unknown fields.
    """
    path = root / CONFIG_NAME
    if not path.is_file() and is_training_checkpoint(root):
        path = root / TRAINING_MODEL_DIR / CONFIG_NAME  # colossalai's save_config_file writes it beside the shards
    if path.is_file():
        if overrides:
            raise ValueError(
                f"{root} has {CONFIG_NAME}; dit_config is only for directories without one (RLinf's layout): drop it"
            )
        return STDiT3Config.from_json(path), json.loads(path.read_text()), path.relative_to(root).as_posix()
    known = {f.name for f in fields(STDiT3Config)}
    unknown = sorted(set(overrides or {}) - known - {"image_size"})
    if unknown:
        raise ValueError(f"dit_config: unknown STDiT3 field(s) {unknown}; valid: {', '.join(sorted(known))}")
    raw = {**RELEASED_CONFIG, **(overrides or {})}
    source = f"no {CONFIG_NAME}: the released STDiT3-XL/2 sizes" + (" with dit_config" if overrides else "")
    return STDiT3Config(**{k: v for k, v in raw.items() if k in known}), raw, source


def load_dit_state(root: Path, hint: str, dit_weights: str = "ema") -> tuple[dict[str, torch.Tensor], str]:
    """``(tensors, which files)``: the index (or ``model.safetensors``) if present, else every ``model-*.safetensors``
    shard found by name, as RLinf reads ``model-00001.safetensors`` without an index. In a training checkpoint of
    the fork, ``ema.pt`` (``dit_weights="ema"``) or ``model/`` (``"model"``)."""
    if is_training_checkpoint(root):
        return load_training_checkpoint(root, hint, dit_weights)
    if (root / INDEX_NAME).is_file() or (root / SINGLE_NAME).is_file():
        name = INDEX_NAME if (root / INDEX_NAME).is_file() else SINGLE_NAME
        return load_weights(root, hint=hint), name
    shards = sorted(p for p in root.iterdir() if SHARD_PATTERN.fullmatch(p.name))
    if not shards:
        return load_weights(root, hint=hint), ""  # raises the one-line "no weights" error

    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        part = load_safetensors(shard)
        clash = sorted(set(part) & set(state))
        if clash:
            raise CheckpointError(f"{shard}: tensor {clash[0]!r} is also in an earlier shard; keep one copy")
        state.update(part)
    return state, ", ".join(p.name for p in shards) + f" (no {INDEX_NAME}: found by name)"


def load_training_checkpoint(root: Path, hint: str, dit_weights: str) -> tuple[dict[str, torch.Tensor], str]:
    """The DiT of a fork training checkpoint: ``ema.pt`` or ``model/`` (see the module docstring); ``dit_weights``
    (one of :data:`DIT_WEIGHTS`) is checked where it is configured, :class:`OpenSoraWorldModel`."""

    where = f"{root} (an RLinf/opensora training checkpoint)"
    if dit_weights == "ema":
        if not (root / EMA_NAME).is_file():
            raise CheckpointError(f"{where} has no {EMA_NAME}; load its {TRAINING_MODEL_DIR}/ with dit_weights: model")
        return load_pth_state_dict(root / EMA_NAME, "EMA"), f"{EMA_NAME} (training checkpoint, the EMA)"
    model_dir = root / TRAINING_MODEL_DIR
    if not model_dir.is_dir():
        raise CheckpointError(f"{where} has no {TRAINING_MODEL_DIR}/; load its {EMA_NAME} with dit_weights: ema")
    return load_weights(model_dir, hint=hint), f"{TRAINING_MODEL_DIR}/{INDEX_NAME} (training checkpoint, the model)"
