"""A policy's way to say that the episodes in flight cannot go on (a remote policy's server restarted): the eval loop
restarts them from their reset states, and the episodes already finished stay counted, once."""

from __future__ import annotations


class EpisodesInterrupted(Exception):
    """Raised by :meth:`Policy.act` instead of actions: the episodes running in the env's sub-envs are started again
    from their reset states (:func:`rlinf_core.rl.evaluation.eval_passes`); no record of them was written yet, so
    nothing is counted twice and nothing finished is lost.

    Args:
        reason: one line on why (shown in the log).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
