"""Dataset normalisation statistics of VLA checkpoints (OpenVLA / OFT / π0 style).

``norm_stats`` maps a dataset key to ``{"action": {"q01", "q99", "min", "max", "mask", ...},
"proprio": {...}}``. Released directories keep them in ``config.json`` and / or a
``dataset_statistics.json`` beside it; LIBERO keys are usually ``{suite}_no_noops``.
``mask`` marks the dimensions that are normalised (the gripper usually is not).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from rlinf_core.models.weights import read_json

NormalizationType = Literal["bounds_q99", "bounds"]
STATISTICS_FILE = "dataset_statistics.json"


def read_norm_stats(path: str | Path, config: dict | None = None) -> dict:
    """``config["norm_stats"]`` updated with ``path/dataset_statistics.json`` (if present).

    A bare ``{"action": ...}`` file (no dataset key) is stored under the directory's name.
    """
    path = Path(path)
    stats = dict((config or {}).get("norm_stats") or {})
    extra = path / STATISTICS_FILE
    if extra.is_file():
        data = read_json(extra)
        if "action" in data and isinstance(data["action"], dict) and "q01" in data["action"]:
            data = {path.name: data}
        stats.update(data)
    return stats


def resolve_unnorm_key(norm_stats: dict, unnorm_key: str | None, source: str) -> str:
    """Pick the statistics key: exact, then ``{key}_no_noops``; ``None`` works with a single key."""
    keys = sorted(norm_stats)
    if not keys:
        raise ValueError(f"{source} has no norm_stats; add them to config.json or a {STATISTICS_FILE} next to it")
    if unnorm_key is None:
        if len(keys) == 1:
            return keys[0]
        raise ValueError(f"{source} has statistics for several datasets; set unnorm_key to one of: {', '.join(keys)}")
    for candidate in (unnorm_key, f"{unnorm_key}_no_noops"):
        if candidate in norm_stats:
            return candidate
    raise ValueError(f"unnorm_key {unnorm_key!r} not in the norm stats of {source}; available: {', '.join(keys)}")


def bounds(
    stats: dict, normalization_type: NormalizationType = "bounds_q99", dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(low, high, mask)`` ``[D]`` CPU tensors of one entry (``q01``/``q99`` or ``min``/``max``, ``mask``)."""
    low_key, high_key = ("q01", "q99") if normalization_type == "bounds_q99" else ("min", "max")
    if low_key not in stats or high_key not in stats:
        raise ValueError(
            f"statistics lack {low_key!r}/{high_key!r} needed by normalization_type={normalization_type!r};"
            f" present: {sorted(stats)}"
        )
    cpu = torch.device("cpu")  # also when built under rlinf_core.models.meta.meta_init
    low = torch.tensor(stats[low_key], dtype=dtype, device=cpu)
    high = torch.tensor(stats[high_key], dtype=dtype, device=cpu)
    if low.shape != high.shape or low.dim() != 1:
        raise ValueError(f"statistics {low_key}/{high_key} must be equal-length lists")
    mask = stats.get("mask")
    mask = torch.ones_like(low, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool, device=cpu)
    if mask.shape != low.shape:
        raise ValueError(f"statistics mask has {mask.numel()} entries, {low_key} has {low.numel()}")
    return low, high, mask


def normalize_bounds(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[..., D]`` → ``2 (x - low) / (high - low) - 1`` clipped to [-1, 1] where ``mask``, ``x`` elsewhere."""
    low, high, mask = (t.to(x.device) for t in (low, high, mask))
    return torch.where(mask, (2 * (x - low) / (high - low + 1e-8) - 1).clamp(-1, 1), x)


def unnormalize_bounds(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`normalize_bounds` on [-1, 1]: ``0.5 (x + 1)(high - low) + low`` where ``mask``."""
    low, high, mask = (t.to(x.device) for t in (low, high, mask))
    return torch.where(mask, 0.5 * (x + 1.0) * (high - low + 1e-8) + low, x)
