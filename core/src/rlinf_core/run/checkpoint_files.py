"""Atomic, verifiable checkpoint files.

A checkpoint is written to a hidden temporary name in its directory, flushed to disk (``fsync``) and renamed
over its final name, so a kill or a full disk never leaves a half-written ``*.ckpt`` (the previous
checkpoint stays intact). Loading checks the zip container's CRC of every record before unpickling with
``weights_only=True`` (a checkpoint cannot run code), and a truncated or corrupt file fails with one line
naming it. :func:`resolve_resume_path` picks the newest good checkpoint of a directory, skipping bad ones.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from rlinf_core.models.weights import CheckpointError, load_pth_state_dict, load_safetensors  # noqa: F401 - one error class; loaders re-exported


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# Hand-written: Lightning's TorchCheckpointIO and fsspec write in place, so a kill mid-save leaves a truncated
# last.ckpt; temp file + fsync + os.replace (+ directory fsync) is what makes `kill -9` resumable.
def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary name, fsync, rename; on failure the target is untouched and no temp remains."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            kept = f"; the previous checkpoint {path.name} is intact" if path.exists() else ""
            raise CheckpointError(f"could not write checkpoint {path}: {exc.strerror or exc}{kept}") from None
        raise
    fsync_dir(path.parent)


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise :class:`CheckpointError` (one line) when ``path`` is missing, empty, truncated or corrupt."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): the write that made it did not finish")
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt ({exc})") from None
    if bad is not None:
        raise CheckpointError(f"checkpoint {path} is corrupt (record {bad!r} fails its CRC check)")


def load_checkpoint_file(path: str | os.PathLike, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """Verify ``path`` and load it with ``weights_only=True``; every failure is a one-line :class:`CheckpointError`
    (``mmap``: tensors stay on disk, for a check of the file)."""
    verify_checkpoint(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file; say which
        raise CheckpointError(
            f"checkpoint {path} cannot be loaded safely (weights_only): {_unpickling_cause(exc)}; "
            "it is corrupt, or not a checkpoint torch.save wrote"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"checkpoint {path} is not a Lightning checkpoint (no state_dict)")
    return ckpt


def _unpickling_cause(exc: BaseException) -> str:
    """The informative part of torch's multi-line weights-only error (``Unsupported operand 43``), not its advice
    to load with ``weights_only=False``."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    marker = next((i for i, ln in enumerate(lines) if ln.endswith("WeightsUnpickler error:")), None)
    if marker is not None and marker + 1 < len(lines):
        return lines[marker + 1][:200]
    if marker is not None or not lines:
        return type(exc).__name__
    return f"{type(exc).__name__}: {lines[0][:200]}"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO with atomic writes and verified, ``weights_only`` reads."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location: Any = lambda storage, loc: storage, weights_only: bool | None = None):
        return load_checkpoint_file(path, map_location)


def install_atomic_io(trainer: Any) -> None:
    """Use :class:`AtomicCheckpointIO` where the strategy writes one file with the plain torch IO (single device,
    DDP); DeepSpeed and FSDP2 write their own (sharded) formats."""
    from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy

    strategy = trainer.strategy
    plain = isinstance(strategy, (SingleDeviceStrategy, DDPStrategy)) and not isinstance(strategy, DeepSpeedStrategy)
    if plain and type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


_STEP = re.compile(r"step=(\d+)")


def _checkpoint_order(path: Path) -> tuple[int, float]:
    m = _STEP.search(path.name)
    return (int(m.group(1)) if m else -1, path.stat().st_mtime)


def checkpoints_in(directory: Path) -> list[Path]:
    """Checkpoint files of a run directory (``<dir>``, ``<dir>/checkpoints``), newest first, links excluded."""
    for d in (directory, directory / "checkpoints"):
        found = [p for p in d.glob("*.ckpt") if p.is_file() and not p.is_symlink()] if d.is_dir() else []
        if found:
            return sorted(found, key=_checkpoint_order, reverse=True)
    return []


def resolve_resume_path(ckpt_path: str | None) -> str | None:
    """The checkpoint to resume from.

    A directory (a run's ``version_N`` or its ``checkpoints``) resumes automatically from its newest good
    checkpoint, skipping truncated or corrupt ones with a warning. A file must be good: a bad one fails in one
    line that names the newest good checkpoint beside it. Other values (``last``, ``best``, ``None``) pass through.
    """
    if not ckpt_path or ckpt_path in ("last", "best", "hpc", "registry"):
        return ckpt_path
    path = Path(ckpt_path)
    if path.is_dir():
        found = checkpoints_in(path)
        if not found:
            raise CheckpointError(f"--ckpt_path {path}: no *.ckpt in it or in its checkpoints/ directory")
        for candidate in found:
            try:
                verify_checkpoint(candidate)
                return str(candidate)
            except CheckpointError as exc:
                print(f"rlinf: warning: skipping {exc}", file=sys.stderr)
        raise CheckpointError(f"--ckpt_path {path}: none of its {len(found)} checkpoints is readable")
    try:
        verify_checkpoint(path)
    except CheckpointError as exc:
        good = None
        for candidate in checkpoints_in(path.parent):
            try:
                verify_checkpoint(candidate)
                good = candidate
                break
            except CheckpointError:
                continue
        hint = f"; the newest good one is {good} (or pass the directory to pick it automatically)" if good else ""
        raise CheckpointError(f"{exc}{hint}") from None
    return str(path)
