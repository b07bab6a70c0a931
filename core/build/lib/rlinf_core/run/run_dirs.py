"""Nothing lost: a run never writes into an earlier run's directory or over the model it reads.

Checked by ``rlinf fit`` before anything is written (so a refused start leaves no run directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

OUTPUTS = ("config.yaml", "policy", "checkpoints", "eval", "metrics.csv")


def check_outputs(trainer: Any, module: Any) -> None:
    """Raise ``ValueError`` (one line) when the run would overwrite an earlier run's outputs or its input model.

    Args:
        trainer: the Lightning trainer (its logger decides the run directory).
        module: the LightningModule (its ``policy.model_path``, if any, is the input model).
    """
    if os.environ.get("LOCAL_RANK", "0") != "0" or trainer.logger is None:
        return  # ranks started by the launcher see rank 0's fresh directory
    log_dir = trainer.log_dir
    if log_dir is None:
        return
    run = Path(log_dir).resolve()
    pinned = getattr(trainer.logger, "_version", None) is not None
    if pinned and run.is_dir() and any((run / name).exists() for name in OUTPUTS):
        raise ValueError(
            f"{run} holds an earlier run's outputs (logger version {trainer.logger.version!r}): leave "
            "trainer.logger.init_args.version unset for a new directory (resume with --ckpt_path <that dir>)"
        )
    model_path = getattr(getattr(module, "policy", None), "model_path", None)
    if model_path and getattr(module, "export_policy", False):
        src, export = Path(model_path).resolve(), run / "policy"
        if src == export or export in src.parents or src in export.parents:
            raise ValueError(
                f"policy.model_path {model_path} is this run's export directory {export}: the export would "
                "overwrite the input model; copy the model elsewhere or set export_policy: false"
            )
