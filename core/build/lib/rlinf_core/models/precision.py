"""Policy precision: which dtype the weights are stored in and which dtype the forward computes in.

A policy's ``precision`` setting (``fp32`` | ``bf16`` | ``fp16`` | ``bf16-true``) resolves to a
:class:`Precision`:

* ``fp32``: everything in float32 (compute dtype: whatever the trainer's precision autocasts to).
* ``bf16`` / ``fp16`` (mixed, the shipped GPU setting): forward passes run under
  ``torch.autocast`` in that dtype, **trainable parameters stay float32** (so gradients, AdamW
  state and the weight update are float32: the "master weights"), frozen weights (a LoRA base
  model, unused layers) are stored in the low dtype to save memory. Use ``fp16`` with the
  trainer's ``precision: 16-mixed`` (its gradient scaler guards fp16 gradients against underflow).
* ``bf16-true``: every parameter, trainable ones included, is stored in bfloat16 and AdamW
  updates bfloat16 tensors. An update smaller than ~1/256 of a weight rounds away (at lr 2e-5
  most do), so this is only for memory-bound experiments; a warning says so once.

The trainer's ``precision: bf16-mixed`` enters the same autocast around training steps and
rollouts; under FSDP2 the gathered parameters are cast to bf16 once (``MixedPrecisionPolicy``),
under DeepSpeed its bf16 mode keeps the fp32 master weights in the optimizer.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PRECISIONS = ("fp32", "bf16", "fp16", "bf16-true")
_warned: set[str] = set()


@dataclass(frozen=True)
class Precision:
    """Resolved precision: ``compute`` (autocast dtype), ``trainable`` and ``frozen`` storage dtypes."""

    name: str
    compute: torch.dtype
    trainable: torch.dtype
    frozen: torch.dtype


def resolve_precision(name: str) -> Precision:
    """``fp32`` | ``bf16`` | ``fp16`` | ``bf16-true`` → :class:`Precision` (one-line error otherwise)."""
    if name not in PRECISIONS:
        raise ValueError(
            f"precision {name!r} not supported; use one of {', '.join(PRECISIONS)} (bf16: bf16 compute with fp32 "
            "trainable weights; bf16-true: everything in bf16)"
        )
    if name == "bf16-true":
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                "precision: bf16-true stores trainable weights and AdamW state in bfloat16: updates smaller than "
                "~1/256 of a weight round away (at lr 2e-5 most do). Use precision: bf16 (bf16 compute, fp32 master "
                "weights) unless memory forces this.",
                stacklevel=3,
            )
        return Precision(name, torch.bfloat16, torch.bfloat16, torch.bfloat16)
    dtype = _DTYPES[name]
    return Precision(name, dtype, torch.float32, dtype)


def apply_precision(module: nn.Module, precision: Precision | str) -> Precision:
    """Cast parameters in place: ``requires_grad`` ones to ``precision.trainable``, the rest to
    ``precision.frozen``. Buffers keep their dtype (e.g. rotary frequencies stay float32).
    Call after freezing / LoRA wrapping: which parameters train decides their dtype."""
    prec = resolve_precision(precision) if isinstance(precision, str) else precision
    for param in module.parameters():
        if not param.is_floating_point():
            continue
        dtype = prec.trainable if param.requires_grad else prec.frozen
        if param.dtype != dtype:
            param.data = param.data.to(dtype)
    return prec


def compute_context(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` in ``dtype`` on ``device`` unless ``dtype`` is float32/None, the device
    has no autocast (meta) or an autocast is already active there (e.g. the trainer's)."""
    if dtype is None or dtype == torch.float32 or not torch.amp.is_autocast_available(device.type):
        return nullcontext()
    if torch.is_autocast_enabled(device.type):
        return nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def under_compute_dtype(fn):
    """Decorator for policy entry points: run under :func:`compute_context` of ``self.compute_dtype``."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        dtype = getattr(self, "compute_dtype", None)
        if dtype is None or dtype == torch.float32:
            return fn(self, *args, **kwargs)
        with compute_context(self.device, dtype):
            return fn(self, *args, **kwargs)

    wrapper._rlinf_compute_wrapped = True
    return wrapper
