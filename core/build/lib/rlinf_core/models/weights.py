"""Weights in the Hugging Face layout: ``model.safetensors``, or shards + ``model.safetensors.index.json``.

Used by every policy plugin that reads or writes released checkpoints (OpenVLA, π0, world models),
so sharding, the index format and the one-line errors are the same everywhere.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


class CheckpointError(ValueError):
    """A checkpoint directory is missing files or does not match the model built from its config."""


def read_json(path: str | Path, kind: type = dict):
    """The JSON file ``path`` (an object by default); one-line :class:`CheckpointError` naming it otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); re-download or re-export it") from None
    if not isinstance(data, kind):
        raise CheckpointError(f"{path} holds a JSON {type(data).__name__}, expected a JSON {kind.__name__} (object)")
    return data


def load_weights(model_path: str | Path, hint: str = "") -> dict[str, torch.Tensor]:
    """All tensors of a directory: sharded safetensors + index, or a single ``model.safetensors``.

    Args:
        model_path: the checkpoint directory.
        hint: appended to the error when no weights are found (e.g. how to make a tiny checkpoint).
    """
    from rlinf_core.run.checkpoint_files import load_safetensors as load_file  # a truncated / corrupt file: one line naming it

    path = Path(model_path)
    index = path / INDEX_NAME
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f'{index} has no "weight_map" {{tensor name: shard file}}; re-download the checkpoint')
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise CheckpointError(
                f"{index} lists {len(shards)} shard(s) but {', '.join(missing)} is missing; re-download the checkpoint"
            )
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(path / shard)))
        absent = sorted(set(weight_map) - set(state))
        if absent:
            raise CheckpointError(f"{index} maps {len(absent)} tensors not found in the shards, e.g. {absent[0]!r}")
        return state
    if (path / SINGLE_NAME).is_file():
        return load_file(str(path / SINGLE_NAME))
    found = sorted(p.name for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES) if path.is_dir() else []
    raise CheckpointError(
        f"no weights in {str(path)!r}: expected {SINGLE_NAME} or {INDEX_NAME} + shards"
        f" (found: {', '.join(found) or 'nothing'})" + (f"; {hint}" if hint else "")
    )


def save_weights(
    state: dict[str, torch.Tensor],
    path: str | Path,
    max_shard_bytes: int = 5 * 1024**3,
    num_shards: int | None = None,
) -> list[str]:
    """Write ``model.safetensors`` or ``model-0000k-of-0000n.safetensors`` + index; returns the file names.

    Shards are filled up to ``max_shard_bytes``; ``num_shards`` instead splits into that many shards
    of about equal size. Stale weight files of an earlier save in ``path`` are removed.
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = done = 0
    for key, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if num_shards:
            full = len(shards) < num_shards and done >= total * len(shards) / num_shards
        else:
            full = size + nbytes > max_shard_bytes
        if shards[-1] and full:
            shards.append({})
            size = 0
        shards[-1][key] = tensor
        size += nbytes
        done += nbytes
    for stale in list(path.glob("model-*-of-*.safetensors")) + [path / INDEX_NAME, path / SINGLE_NAME]:
        stale.unlink(missing_ok=True)
    if len(shards) == 1:
        save_file(shards[0], str(path / SINGLE_NAME), metadata={"format": "pt"})
        return [SINGLE_NAME]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    for name, shard in zip(names, shards):
        save_file(shard, str(path / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (path / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    return names + [INDEX_NAME]


def copy_side_files(src: str | Path, dst: str | Path) -> None:
    """Copy tokenizer / processor / code / statistics files (everything but weights and config.json)."""
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        return
    skip = {"config.json", INDEX_NAME, "adapter_config.json"}
    for f in src.iterdir():
        if f.is_file() and f.name not in skip and f.suffix not in WEIGHT_SUFFIXES:
            shutil.copy2(f, dst / f.name)
