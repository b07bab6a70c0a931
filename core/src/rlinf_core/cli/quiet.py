"""Quiet-by-default console: Lightning's advertising tips and known, harmless library warnings are
dropped (``rlinf --verbose`` keeps them). Warnings raised from the user's own code still show."""

from __future__ import annotations

import logging
import warnings

# messages (regexes matched at the start) of known warnings a user can do nothing about
KNOWN_WARNINGS = [
    r"LightningCLI's args parameter is intended to run from within Python",  # rlinf passes its parsed argv
    r".*isinstance\(treespec, LeafSpec\)",  # torch >= 2.9 deprecation hit inside Lightning's _pytree
    r"The '\w+_dataloader' does not have many workers",  # RL batches come from the rollout, not a loader
    r".*Checkpoint directory .* exists and is not empty",
    r"You are using `torch.load` with `weights_only=False`",
    r"The dirpath has changed from",  # validate --ckpt_path of an earlier run: expected, nothing to fix
    r"It is recommended to use `self.log\(.*sync_dist=True\)",  # RLModule all-reduces its metrics itself
]
# deprecation warnings raised inside these libraries (not in the user's code)
LIBRARY_MODULES = [
    "lightning",
    "torch",
    "jsonargparse",
    "transformers",
    "timm",
    "tensorboard",
    "google.protobuf",
    "pkg_resources",
    "setuptools",
    "mujoco",
    "gymnasium",
    "robosuite",
    "libero",
    "mani_skill",
]
# adverts; the run summary says why fit ended; SFT's step count is not news
DROPPED_PREFIXES = ("💡 Tip", "`Trainer.fit` stopped", "Loading `train_dataloader` to estimate")
LIGHTNING_LOGGERS = ["lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"]


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(DROPPED_PREFIXES)


def install_quiet_filters() -> None:
    """Drop Lightning's tips and the known library warnings in this process."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in logger.filters):
            logger.addFilter(_DropTips())
    for message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for module in LIBRARY_MODULES:
        for category in (DeprecationWarning, FutureWarning, PendingDeprecationWarning):
            warnings.filterwarnings("ignore", category=category, module=rf"{module}(\.|$)")
