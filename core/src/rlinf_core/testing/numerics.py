"""Float32 tolerances derived from the computation, for tests that compare two evaluations of the same maths::

    from rlinf_core.testing.numerics import assert_close_reordered
    assert_close_reordered(cached, joint, n=588, depth=60)  # longest sum: a 14x14x3 patch; ~60 sums in a row

Two evaluations of the same maths that differ in the order of their float32 sums (another batch size or padding, a
cached against a joint pass, sharded against whole, another CPU: torch, oneDNN and MKL block their sums by
instruction set and vendor) agree only up to rounding, and the tolerance must cover any such order:

- One sum of ``n`` terms: every partial sum is rounded once, by at most ``u·|partial sum|`` (``u = 2**-24``).
  Round-to-nearest errors are unbiased and, over the many partial sums of one result, behave as independent
  (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.8 and §4.2): a sum whose terms carry
  both signs moves by about ``sqrt(n)·u`` of its own size from one order to another. The worst case, every
  rounding in one direction, is ``n·u``: it is never approached, and a bound that large would hide the small
  output changes that a masking or position bug makes in a tiny random model, whose attention is near-uniform.
- A chain of ``depth`` sums (a network's longest path: projections, attention scores and weighted sums,
  normalisations): the independent errors add in quadrature, ``sqrt(depth·n)·u``, as long as no layer amplifies
  what it is handed. The tiny random models of these tests have weights of std <= 0.02: their layers shrink their
  inputs and their attention logits stay far below 1.
- An elementwise comparison of up to ~1e5 outputs: a margin of ``k = 10`` standard deviations (probability of one
  element beyond it < 1e-18).

So :func:`reorder_rtol` is ``10·sqrt(depth·n)·2**-24`` of the compared output's largest magnitude (``gain``
multiplies it for a final map that is not 1-Lipschitz, e.g. a log-softmax at temperature T: 2/T).
"""

from __future__ import annotations

import math

import torch

U32 = 2.0**-24  #: float32 unit roundoff
K_SIGMA = 10.0  #: margin, in standard deviations of the rounding difference


def reorder_rtol(n: int, depth: int = 1, gain: float = 1.0, dtype: torch.dtype = torch.float32) -> float:
    """``gain · 10 · sqrt(depth · n) · u``: how far two evaluations of the same chain of ``depth`` sums of at most
    ``n`` terms may differ, relative to the output's size (``u``: ``dtype``'s unit roundoff, 2**-24 for float32)."""
    return gain * K_SIGMA * math.sqrt(depth * max(n, 1)) * torch.finfo(dtype).eps / 2


def assert_close_reordered(
    actual: torch.Tensor,
    expected: torch.Tensor,
    n: int,
    depth: int = 1,
    gain: float = 1.0,
    msg: str | None = None,
) -> None:
    """``|actual - expected| <= reorder_rtol(n, depth, gain, expected.dtype) · max|expected|`` everywhere."""
    atol = reorder_rtol(n, depth, gain, expected.dtype) * float(expected.detach().abs().max())
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=atol, msg=msg)
