"""``--ckpt_path`` against the run it should continue: before ``fit`` starts, one line saying what the checkpoint
holds and what the config expects (another algorithm, another model size, ``last`` with no checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlinf_core.contracts.rl_loop import RLLoop


def _checkpoint_dirs(trainer: Any) -> list[Path]:
    dirs = [Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if getattr(cb, "dirpath", None)]
    logger = trainer.logger
    if logger is not None and getattr(logger, "_version", None) is not None and trainer.log_dir:
        dirs.append(Path(trainer.log_dir) / "checkpoints")  # a pinned version: Lightning looks there
    return dirs


def _algorithm_of(path: Path, ckpt: dict) -> str | None:
    """The algorithm the checkpoint was trained with: from the run's saved config.yaml beside it, else from its
    optimizer (a ``critic`` parameter group is PPO's)."""
    for cfg_path in (path.parent.parent / "config.yaml", path.parent / "config.yaml"):
        if cfg_path.is_file():
            try:
                cfg = yaml.safe_load(cfg_path.read_text())
                return str(cfg["model"]["init_args"]["algorithm"]["class_path"]).rpartition(".")[2]
            except Exception:  # noqa: BLE001 - an edited config.yaml: fall back to the optimizer
                break
    groups = [g.get("name") for s in ckpt.get("optimizer_states") or [] for g in s.get("param_groups", [])]
    return "PPO" if "critic" in groups else None


def check_resume(trainer: Any, model: Any, ckpt_path: str | None) -> None:
    """Raise ``ValueError`` when ``ckpt_path`` cannot continue this run's config."""
    if not ckpt_path:
        return
    if ckpt_path == "last":
        dirs = _checkpoint_dirs(trainer)
        if not any(d.is_dir() and any(d.glob("*.ckpt")) for d in dirs):
            where = ", ".join(map(str, dirs)) or "no checkpoint directory (the logger version is not pinned)"
            raise ValueError(
                f"ckpt_path: last has no checkpoint to resume from ({where}); pass the run "
                "directory instead (--ckpt_path runs/<name>/version_N), or drop --ckpt_path"
            )
        return
    if ckpt_path in ("best", "hpc", "registry"):
        return
    from rlinf_core.run.checkpoint_files import load_checkpoint_file

    path = Path(ckpt_path)
    ckpt = load_checkpoint_file(path)
    algorithm = getattr(model, "algorithm", None)
    if algorithm is not None:
        held, expected = _algorithm_of(path, ckpt), type(algorithm).__name__
        if held is not None and held != expected:
            raise ValueError(
                f"checkpoint {path} holds a {held} run but the config trains with {expected}: resume "
                f"it with its own config (its run directory's config.yaml), or start fresh"
            )
    state, own = ckpt["state_dict"], model.state_dict()
    from rlinf_core.run.checkpointing import FROZEN_KEY

    left_out = set((ckpt.get(FROZEN_KEY) or {}).get("keys") or [])  # trainable-only: frozen weights from model_path
    missing = [k for k in own if k not in state and k not in left_out]
    for key, value in state.items():
        mine = own.get(key)
        if mine is not None and tuple(mine.shape) != tuple(value.shape):
            raise ValueError(
                f"checkpoint {path} holds {key} of shape {tuple(value.shape)}, the config builds "
                f"{tuple(mine.shape)}: it is a checkpoint of another model size (compare the "
                "policy's init_args with the run's config.yaml)"
            )
    extra = [k for k in state if k not in own]
    if extra or missing:
        what = f"{extra[0]} which the config's model lacks" if extra else f"no {missing[0]}, which the config builds"
        raise ValueError(
            f"checkpoint {path} holds {what} ({len(extra)} extra, {len(missing)} missing tensors): "
            "it is a checkpoint of another model; resume with its own config"
        )
    stop_if_finished(trainer, model, path, ckpt)


def stop_if_finished(trainer: Any, model: Any, path: Path, ckpt: dict) -> None:
    """A checkpoint that already reached the trainer's limit would run 0 steps in a new run directory: say so and
    which key continues it, and exit 0 before that directory is written."""
    progress = (((ckpt.get("loops") or {}).get("fit_loop") or {}).get("epoch_progress") or {}).get("current") or {}
    # an epoch-end checkpoint counts its epoch as processed (completed follows after the save); resume skips it
    epochs = int(progress.get("processed", progress.get("completed", int(ckpt.get("epoch", -1)) + 1)))
    steps = int(ckpt.get("global_step", 0))
    unit = "RL steps" if isinstance(model, RLLoop) else "epochs"
    if trainer.max_epochs is not None and 0 < trainer.max_epochs <= epochs:
        done, key, more = f"{epochs} {unit[:-1] if epochs == 1 else unit}", "trainer.max_epochs", 2 * epochs
    elif trainer.max_steps is not None and 0 < trainer.max_steps <= steps:
        done, key, more = f"{steps} optimizer steps", "trainer.max_steps", 2 * steps
    else:
        return
    if trainer.is_global_zero:
        print(
            f"rlinf: {path} has already finished: {done}, and the config stops at {key} = "
            f"{getattr(trainer, key.split('.')[1])}. Nothing to run; to continue it, raise the limit, e.g. "
            f"--{key}={more}",
            flush=True,
        )
    raise SystemExit(0)
