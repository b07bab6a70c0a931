"""Which Trainer a LightningModule (or progress bar) is attached to, through Lightning's public property."""

from __future__ import annotations

from typing import Any


def attached_trainer(obj: Any) -> Any | None:
    """``obj.trainer``, or ``None`` while ``obj`` is not attached to a Trainer (Lightning's ``trainer`` property
    raises then: ``RuntimeError`` on a LightningModule, ``TypeError`` on a progress bar; modules and callbacks are
    also used on their own, e.g. in ``rlinf serve``)."""
    try:
        return obj.trainer
    except (RuntimeError, TypeError):
        return None
