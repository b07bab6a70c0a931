"""RLinf's critic head, shared by the VLA policies (parameter names ``mlp.0``, ``mlp.2``, ``mlp.4``)."""

from __future__ import annotations

import torch
from torch import nn


class ValueHead(nn.Module):
    """Linear→activation per hidden size, then a last Linear: ``[..., input_dim]`` → ``[..., output_dim]``.

    OpenVLA(-OFT): GELU, last layer without bias; π0 / π0.5 (RLinf's ``ValueHead(..., activation="relu",
    bias_last=True)``): ReLU, last layer with a zero bias. Hidden layers Kaiming-normal (fan-out), the last
    layer N(0, 0.02²), biases zero.

    Args:
        input_dim: width of the features it reads (e.g. the LLM hidden size).
        output_dim: 1 (chunk-level value) or ``C`` (one value per sub-step).
        hidden_sizes: widths of the hidden layers (RLinf: 512, 128).
        activation: ``gelu`` or ``relu``, after every hidden layer.
        bias_last: whether the last Linear has a bias.
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        hidden_sizes: tuple[int, ...] = (512, 128),
        activation: str = "gelu",
        bias_last: bool = False,
    ) -> None:
        super().__init__()
        act = {"gelu": nn.GELU, "relu": nn.ReLU}.get(activation)
        if act is None:
            raise ValueError(f"ValueHead activation must be 'gelu' or 'relu', got {activation!r}")
        layers: list[nn.Module] = []
        d = input_dim
        for h in hidden_sizes:
            layers += [nn.Linear(d, h), act()]
            d = h
        layers.append(nn.Linear(d, output_dim, bias=bias_last))
        self.mlp = nn.Sequential(*layers)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                if m is self.mlp[-1]:
                    nn.init.normal_(m.weight, std=0.02)
                else:
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)
