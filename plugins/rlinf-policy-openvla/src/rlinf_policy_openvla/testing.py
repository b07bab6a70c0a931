"""Cached tiny checkpoints for tests (this plugin's and other plugins')::

    from rlinf_policy_openvla.testing import FLOAT32_SUMS, tiny_checkpoint
    path = tiny_checkpoint(action_dim=4, norm_keys=["metaworld"])  # same kwargs → same directory

Directories live in a per-process temporary folder removed at exit.
"""

from __future__ import annotations

from pathlib import Path

from rlinf_core.testing.cache import cached_dir
from rlinf_core.testing.numerics import assert_close_reordered
from rlinf_policy_openvla.make_tiny import make_tiny

#: ``(n, depth)`` of the tiny checkpoints' float32 passes, for :mod:`rlinf_core.testing.numerics`: the longest sum
#: has n <= 700 terms (the log-softmax over a vocabulary of ~700 ids; a 14 x 14 x 3 patch has 588), and the longest
#: path takes ~41 sums in a row (ViT 2 blocks and Llama 2 layers of ~9 sums each, projector, LM head, log-softmax).
FLOAT32_SUMS = (700, 41)


def tiny_checkpoint(**kwargs) -> Path:
    """A tiny checkpoint written once per process by :func:`rlinf_policy_openvla.make_tiny.make_tiny`."""

    return cached_dir(make_tiny, "openvla-tiny", **kwargs)


def assert_logprobs_close(actual, expected, temperature: float = 1.0) -> None:
    """Two float32 evaluations of the same token log-probs (rollout and recompute, cache and teacher forcing, merged
    and adapter weights): their logits differ by reordered sums (:data:`FLOAT32_SUMS`), and a log-softmax at
    temperature T moves by at most 2/T per unit of logit. The tiny models' logits are below 1 in size, under the
    log-probs' own (>= log 3 in magnitude), which serve as the scale."""
    assert_close_reordered(actual, expected, *FLOAT32_SUMS, gain=2 / temperature)
