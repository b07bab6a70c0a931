"""Weights in the Hugging Face layout: ``model.safetensors``, or shards + ``model.safetensors.index.json``.

Used by every policy plugin that reads or writes released checkpoints (OpenVLA, π0, world models),
so sharding, the index format and the one-line errors are the same everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


class CheckpointError(ValueError):
    """A checkpoint (a weights directory or file, or a Lightning ``.ckpt``) is missing, corrupt or does not match
    the model built from its config: the one error class of weights and checkpoint IO."""


def load_pth_state_dict(path: str | os.PathLike, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """The state dict in a ``.pth`` / ``.pt`` file (raw, or under ``model_state_dict``), loaded with ``weights_only``;
    one-line errors naming the file (``what`` it is: ``"reward model checkpoint"``, ...)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise ValueError(f"{path}: not a loadable .pth state dict ({type(exc).__name__}: {str(exc)[:120]})") from None
    if isinstance(obj, dict) and "model_state_dict" in obj:
        obj = obj["model_state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ValueError(f"{path}: expected a state dict (or {{'model_state_dict': state dict}}) of tensors")
    return obj


def load_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file, with the names ``safetensors.torch.save_model`` dropped for tied
    weights restored from the file's metadata (``{dropped name: kept name}``, as openpi's PyTorch checkpoints
    store PaliGemma's ``embed_tokens`` / ``lm_head`` tie); one-line errors naming the file.

    Only a header or data region that safetensors cannot parse is reported as truncated or corrupt; a valid
    file that cannot be turned into tensors here (an unsupported dtype, say) is reported as what it is.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file {path} does not exist")
    try:
        handle = safe_open(str(path), framework="pt", device="cpu")
    except (SafetensorError, OSError) as exc:  # the header or the data offsets do not parse: a damaged file
        raise CheckpointError(
            f"weights file {path} is truncated or corrupt ({_first_line(exc)}): re-download or re-export it"
        ) from None
    with handle:
        metadata = handle.metadata() or {}
        state: dict[str, torch.Tensor] = {}
        for name in handle.keys():
            try:
                state[name] = handle.get_tensor(name)
            except (SafetensorError, TypeError, RuntimeError) as exc:
                raise CheckpointError(
                    f"weights file {path} is valid safetensors, but tensor {name!r} cannot be read with this torch "
                    f"({_first_line(exc)})"
                ) from None
    return with_tied_names(state, metadata)


def with_tied_names(state: dict[str, torch.Tensor], metadata: dict[str, str]) -> dict[str, torch.Tensor]:
    """``state`` plus the names ``safetensors.torch.save_model`` dropped for shared tensors: its metadata maps
    each dropped name to the kept one (other metadata, such as ``format``, maps to no tensor and is ignored)."""
    tied = {dropped: kept for dropped, kept in metadata.items() if dropped not in state and kept in state}
    return {**state, **{dropped: state[kept] for dropped, kept in tied.items()}}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


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
    load_file = load_safetensors  # a truncated / corrupt file: one line naming it
    path = Path(model_path)
    index = path / INDEX_NAME
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(
                f'{index} has no "weight_map" {{tensor name: shard file}}; re-download the checkpoint'
            )
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


def _own_storage(t: torch.Tensor) -> torch.Tensor:
    """``t``, copied if it is a view into a larger buffer (DeepSpeed's flat parameter groups, FSDP shards): the hub
    refuses to save a tensor that does not cover its whole storage."""
    if t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size():
        return t
    return t.clone()


def save_weights(
    state: dict[str, torch.Tensor],
    path: str | Path,
    max_shard_bytes: int = 5 * 1024**3,
    num_shards: int | None = None,
) -> list[str]:
    """Write ``model.safetensors`` or ``model-0000k-of-0000n.safetensors`` + index; returns the file names.

    Sharding and the index are ``huggingface_hub.save_torch_state_dict``'s (the layout transformers reads);
    shards are filled up to ``max_shard_bytes``, or ``num_shards`` asks for that many shards of about equal size
    (the smallest shard size that gives at most that many). Stale weight files of an earlier save are removed.
    """
    from huggingface_hub import save_torch_state_dict, split_torch_state_dict_into_shards

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: _own_storage(v.detach().cpu().contiguous()) for k, v in state.items()}
    if num_shards:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        low, high = 1, max(total, 1)
        while low < high:  # the shard count only falls as the size limit grows
            mid = (low + high) // 2
            count = len(split_torch_state_dict_into_shards(tensors, max_shard_size=mid).filename_to_tensors)
            low, high = (mid + 1, high) if count > num_shards else (low, mid)
        max_shard_bytes = low
    for stale in list(path.glob("model-*-of-*.safetensors")) + [path / INDEX_NAME, path / SINGLE_NAME]:
        stale.unlink(missing_ok=True)
    save_torch_state_dict(tensors, path, max_shard_size=max_shard_bytes, metadata={"format": "pt"})
    if (path / INDEX_NAME).is_file():
        return sorted(set(read_json(path / INDEX_NAME)["weight_map"].values())) + [INDEX_NAME]
    return [SINGLE_NAME]


def copy_side_files(src: str | Path, dst: str | Path) -> None:
    """Copy tokenizer / processor / code / statistics files (everything but weights and config.json)."""
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        return
    skip = {"config.json", INDEX_NAME, "adapter_config.json"}
    for f in src.iterdir():
        if f.is_file() and f.name not in skip and f.suffix not in WEIGHT_SUFFIXES:
            shutil.copy2(f, dst / f.name)


def first_non_finite(module: torch.nn.Module) -> str | None:
    """Name of the first parameter or buffer holding NaN / inf (``None``: all finite)."""
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        t: Any = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t.detach()).all()):
            return name
    return None
