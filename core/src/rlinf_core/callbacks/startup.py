"""Lightning's start-up lines (``Seed set to 0``, ``GPU available: ...``, ``Restoring states from ...``) held back
until a run's first line has named its directory: ``rlinf fit`` / ``validate`` hold them from the start
(:func:`hold_startup_lines`) and rlinf's progress bar releases them right after its header
(:func:`release_startup_lines`; the command releases whatever is left when it ends, and drops it when the
command stops with an error first, so that the error stays its last line). Warnings are never held."""

from __future__ import annotations

import logging

# the loggers Lightning's informational start-up lines come from (seeding, device summary, CUDA flags, restore)
STARTUP_LOGGERS = (
    "lightning.fabric.utilities.seed",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.accelerators.cuda",
)


class _Hold(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        self.held.append(record)
        return False


_HOLD: _Hold | None = None


def hold_startup_lines() -> None:
    """From now on, keep Lightning's informational lines until :func:`release_startup_lines`."""
    global _HOLD
    if _HOLD is not None:
        return
    _HOLD = _Hold()
    for name in STARTUP_LOGGERS:
        logging.getLogger(name).addFilter(_HOLD)


def release_startup_lines(drop: bool = False) -> None:
    """Emit the held lines, in order (``drop``: discard them), and stop holding."""
    global _HOLD
    hold, _HOLD = _HOLD, None
    if hold is None:
        return
    for name in STARTUP_LOGGERS:
        logging.getLogger(name).removeFilter(hold)
    for record in [] if drop else hold.held:
        logging.getLogger(record.name).handle(record)  # through the logger's own (quiet) filters and handlers
