"""RLinf's heads on π0 / π0.5: the critic (``value_head.*``) and flow_noise's explore-noise net (``noise_head.*``).

Parameter names are RLinf's, so the optional ``value_head.*`` / ``noise_head.*`` tensors of an RLinf-Pi0-* /
RLinf-Pi05-* checkpoint load strictly (:func:`load_head`).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from rlinf_core.models.value_head import ValueHead as CoreValueHead

#: RLinf's critic widths: (1024, 512, 256) for pi05_libero / pi05_maniskill / pi05_droid_polaris, else these
DEFAULT_VALUE_HIDDEN = (512, 256, 128)


class ValueHead(CoreValueHead):
    """RLinf's π0 critic: Linear→ReLU per hidden size, last Linear with bias, ``[..., input_dim] → [..., output_dim]``.

    Keys ``mlp.{0,2,4,6}.{weight,bias}`` for three hidden layers (RLinf's ``ValueHead(..., activation="relu",
    bias_last=True)``); the core :class:`rlinf_core.models.value_head.ValueHead` with those settings.

    Args:
        input_dim: width of the features read (the expert width on the action expert, the VLM width after it).
        hidden_sizes: hidden widths (RLinf: (512, 256, 128), or (1024, 512, 256) for its π0.5 LIBERO configs).
        output_dim: 1 (chunk-level value).
    """

    def __init__(
        self, input_dim: int, hidden_sizes: tuple[int, ...] = DEFAULT_VALUE_HIDDEN, output_dim: int = 1
    ) -> None:
        super().__init__(input_dim, output_dim, tuple(hidden_sizes), activation="relu", bias_last=True)


def value_hidden_sizes_from(state: dict[str, torch.Tensor]) -> tuple[int, ...] | None:
    """Hidden widths of a saved :class:`ValueHead` (``state``: its tensors without ``value_head.``), None if empty."""
    weights = sorted(
        (int(k.split(".")[1]), v) for k, v in state.items() if k.startswith("mlp.") and k.endswith(".weight")
    )
    return tuple(int(w.shape[0]) for _, w in weights[:-1]) if weights else None


class _MLP(nn.Module):
    """RLinf's ``MLP``: ``moduleList.{i}`` = Sequential(linear_1, act_1); tanh between layers, identity last."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.moduleList = nn.ModuleList()  # noqa: N815 - RLinf's parameter name
        for i in range(len(dims) - 1):
            act = nn.Tanh() if i < len(dims) - 2 else nn.Identity()
            self.moduleList.append(nn.Sequential(OrderedDict(linear_1=nn.Linear(dims[i], dims[i + 1]), act_1=act)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.moduleList:
            x = layer(x)
        return x


class ExploreNoiseNet(nn.Module):
    """flow_noise's learned std ``[B, H, in_dim] → [B, H, out_dim]``: ``exp(½·logvar)`` with the MLP's output
    squashed by tanh into ``[log min_std², log max_std²]``.

    Keys ``mlp_logvar.moduleList.{0,1,2}.linear_1.{weight,bias}`` (RLinf's ``ExploreNoiseNet`` with
    ``hidden_dims=[128, 64]``, tanh, ``noise_scheduler_type="learn"``). The log-variance bounds come from the
    config (``noise_logvar_range``) and are not stored (RLinf's saved ``logvar_min`` / ``logvar_max`` buffers
    are ignored on load, see :func:`load_head`).

    Args:
        in_dim: width of the action expert's suffix output it reads.
        out_dim: model action width (32).
        hidden_dims: MLP hidden widths.
        noise_logvar_range: ``[min_std, max_std]`` of the injected noise.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dims: tuple[int, ...] = (128, 64),
        noise_logvar_range: tuple[float, float] = (0.08, 0.16),
    ) -> None:
        super().__init__()
        lo, hi = (float(x) for x in noise_logvar_range)
        if not 0 < lo <= hi:
            raise ValueError(
                f"noise_logvar_range must be [min_std, max_std] with 0 < min_std <= max_std, got {[lo, hi]}"
            )
        self.mlp_logvar = _MLP([in_dim, *hidden_dims, out_dim])
        self.logvar_min = math.log(lo**2)
        self.logvar_max = math.log(hi**2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        squashed = torch.tanh(self.mlp_logvar(features))
        logvar = self.logvar_min + (self.logvar_max - self.logvar_min) * (squashed + 1) / 2
        return torch.exp(0.5 * logvar)


IGNORED_HEAD_KEYS = ("logvar_min", "logvar_max")  # RLinf's derived noise-head buffers (the config wins)


def load_head(head: nn.Module, state: dict[str, torch.Tensor], prefix: str, source: str) -> None:
    """Strictly load a head's tensors (``state``: names without ``prefix.``) into ``head``; one-line error naming
    the first missing / unexpected key or wrong shape."""
    own = {k: v for k, v in state.items() if k not in IGNORED_HEAD_KEYS}
    expected = head.state_dict()
    missing = sorted(set(expected) - set(own))
    unexpected = sorted(set(own) - set(expected))
    if missing or unexpected:
        key, what = (missing[0], "lacks") if missing else (unexpected[0], "has an unexpected")
        raise ValueError(
            f"{source} {what} {prefix}.{key}; expected {prefix}.* = {sorted(expected)[:4]}... "
            f"({type(head).__name__} of this config)"
        )
    bad = [k for k, v in own.items() if tuple(v.shape) != tuple(expected[k].shape)]
    if bad:
        k = bad[0]
        raise ValueError(
            f"{source}: {prefix}.{k} has shape {tuple(own[k].shape)}, this config's {type(head).__name__} expects "
            f"{tuple(expected[k].shape)}"
        )
    with torch.no_grad():
        for k, p in head.state_dict(keep_vars=True).items():
            p.copy_(own[k].to(p.dtype))


__all__ = ["DEFAULT_VALUE_HIDDEN", "ExploreNoiseNet", "ValueHead", "load_head", "value_hidden_sizes_from"]
