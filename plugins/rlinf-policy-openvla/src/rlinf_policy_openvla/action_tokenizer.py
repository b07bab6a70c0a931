"""OpenVLA's action tokenizer: 256 bins over [-1, 1] on the last ids of the text vocabulary.

Normalised action ``a ∈ [-1, 1]`` ↔ token id ``vocab_size - digitize(a, bins)`` with
``bins = linspace(-1, 1, n_bins)``; decoding maps id → ``bin_centers[clip(vocab_size - id - 1, 0, n_bins - 2)]``.
Env-scale actions come from ``norm_stats[unnorm_key]["action"]``: with BOUNDS_Q99,
``a = 0.5 (a_norm + 1)(q99 - q01 + 1e-8) + q01`` where ``mask`` is true (the gripper usually stays in [-1, 1]).

Inside the policy, logits are sliced to the ``n_bins`` action ids ``[token_begin, vocab_size)``;
"bin index" ``j`` below is the position in that slice (token id = ``token_begin + j``).
"""

from __future__ import annotations

import torch

from rlinf_core.models.norm_stats import NormalizationType, bounds, normalize_bounds, unnormalize_bounds


class ActionTokenizer:
    """Bins, bin ↔ token mapping and (un)normalisation for one dataset's statistics.

    Args:
        vocab_size: size of the text vocabulary without padding (32000 for Llama-2); the action
            ids are its last ``n_bins`` ids.
        n_bins: number of bins over [-1, 1] (256 for OpenVLA).
        action_stats: ``norm_stats[key]["action"]`` (``q01``/``q99``, or ``min``/``max``, optional ``mask``).
        normalization_type: ``bounds_q99`` (OpenVLA/LIBERO) or ``bounds`` (min/max, e.g. ALOHA).
    """

    def __init__(
        self,
        vocab_size: int,
        n_bins: int,
        action_stats: dict,
        normalization_type: NormalizationType = "bounds_q99",
    ) -> None:
        if n_bins < 2 or vocab_size <= n_bins:
            raise ValueError(f"need 2 <= n_action_bins < vocab size, got n_bins={n_bins}, vocab_size={vocab_size}")
        self.vocab_size = vocab_size
        self.n_bins = n_bins
        self.token_begin = vocab_size - n_bins
        # float64 lookup tables on the CPU (moved to the data's device on use), also under
        # rlinf_core.models.meta.meta_init
        self.low, self.high, self.mask = bounds(action_stats, normalization_type)
        cpu = torch.device("cpu")
        self.bins = torch.linspace(-1.0, 1.0, n_bins, dtype=torch.float64, device=cpu)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2
        j = torch.arange(n_bins, device=cpu)
        # value of slice position j: token id token_begin + j → centre index clip(n_bins - 1 - j, 0, n_bins - 2)
        self.bin_values = self.bin_centers[(n_bins - 1 - j).clamp(0, n_bins - 2)]

    @property
    def action_dim(self) -> int:
        return self.low.numel()

    # ---- bins ↔ normalised actions -------------------------------------------------------------
    def bins_to_normalized(self, bin_index: torch.Tensor) -> torch.Tensor:
        """Slice positions ``j`` (any shape) → normalised actions in [-1, 1] (float32)."""
        return self.bin_values.to(bin_index.device)[bin_index].float()

    def normalized_to_bins(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised actions → slice positions ``j`` (``n_bins - digitize(clip(a, -1, 1), bins)``)."""
        a = actions.double().clamp(-1.0, 1.0)
        digit = torch.bucketize(a, self.bins.to(a.device), right=True)  # == np.digitize
        return (self.n_bins - digit).clamp(0, self.n_bins - 1).long()

    def tokens_to_bins(self, token_ids: torch.Tensor) -> torch.Tensor:
        return token_ids - self.token_begin

    def bins_to_tokens(self, bin_index: torch.Tensor) -> torch.Tensor:
        return bin_index + self.token_begin

    # ---- normalised ↔ env scale ---------------------------------------------------------------
    def unnormalize(self, actions: torch.Tensor) -> torch.Tensor:
        """``[..., D]`` normalised → env scale (float32)."""
        self._check_dim(actions)
        return unnormalize_bounds(actions.double(), self.low, self.high, self.mask).float()

    def normalize(self, actions: torch.Tensor) -> torch.Tensor:
        """``[..., D]`` env scale → normalised, clipped to [-1, 1] (float32)."""
        self._check_dim(actions)
        return normalize_bounds(actions.double(), self.low, self.high, self.mask).clamp(-1.0, 1.0).float()

    def _check_dim(self, actions: torch.Tensor) -> None:
        if actions.shape[-1] != self.action_dim:
            raise ValueError(
                f"actions have {actions.shape[-1]} dimensions but the norm stats have {self.action_dim}; "
                f"expected [..., {self.action_dim}]"
            )
