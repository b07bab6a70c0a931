"""RLinf's critic head, shared by the VLA policies (parameter names ``mlp.0``, ``mlp.2``, ``mlp.4``)."""

from __future__ import annotations

import torch
from torch import nn


class ValueHead(nn.Module):
    """Linear→GELU per hidden size, last Linear without bias: ``[..., input_dim]`` → ``[..., output_dim]``.

    Args:
        input_dim: width of the features it reads (e.g. the LLM hidden size).
        output_dim: 1 (chunk-level value) or ``C`` (one value per sub-step).
        hidden_sizes: widths of the hidden layers (RLinf: 512, 128).
    """

    def __init__(self, input_dim: int, output_dim: int, hidden_sizes: tuple[int, ...] = (512, 128)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = input_dim
        for h in hidden_sizes:
            layers += [nn.Linear(d, h), nn.GELU()]
            d = h
        layers.append(nn.Linear(d, output_dim, bias=False))
        self.mlp = nn.Sequential(*layers)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                if m is self.mlp[-1]:
                    nn.init.normal_(m.weight, std=0.02)
                else:
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)
