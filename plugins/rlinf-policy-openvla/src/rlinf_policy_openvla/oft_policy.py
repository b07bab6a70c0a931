"""OpenVLA-OFT for rlinf: all ``C × D`` action tokens decoded in one forward pass (the shared machinery, preprocessing
to export, is :class:`rlinf_policy_openvla.policy._PrismaticPolicy`)."""

from __future__ import annotations

from typing import Any, Literal

import torch

from rlinf_policy_openvla.policy import _PrismaticPolicy
from rlinf_policy_openvla.settings import ActionConfig

AttentionMode = Literal["causal", "bidirectional", "action_block"]


def attention_mask_4d(mask: torch.Tensor, n_actions: int, mode: AttentionMode) -> torch.Tensor:
    """Boolean ``[B, 1, T, T]`` (True = may attend) for a sequence ending in ``n_actions`` action slots.

    ``causal``: standard LM mask. ``bidirectional``: every token sees every non-pad token (what
    upstream OpenVLA-OFT trains with). ``action_block``: causal prompt, the action block attends
    to the whole prompt and to itself in both directions.
    """
    T = mask.shape[1]
    i = torch.arange(T, device=mask.device).unsqueeze(1)
    j = torch.arange(T, device=mask.device).unsqueeze(0)
    if mode == "causal":
        rule = j <= i
    elif mode == "bidirectional":
        rule = torch.ones(T, T, dtype=torch.bool, device=mask.device)
    elif mode == "action_block":
        start = T - n_actions
        rule = (j <= i) | ((i >= start) & (j >= start))
    else:
        raise ValueError(f"attention_mode {mode!r} not supported; use 'causal', 'bidirectional' or 'action_block'")
    return (rule.unsqueeze(0) & mask.bool().unsqueeze(1)).unsqueeze(1)


class OpenVLAOFTPolicy(_PrismaticPolicy):
    """OpenVLA-OFT: all ``C × D`` action tokens decoded in one forward pass (discrete 256-bin head).

    The action block is ``C × D`` zero embeddings appended after the prompt; the last prompt token
    predicts token 0 and slot ``k`` predicts token ``k + 1``. The other settings are :class:`_PrismaticPolicy`'s.

    Args:
        actions: as :class:`_PrismaticPolicy`'s, with 8 actions per chunk by default.
        attention_mode: ``bidirectional`` (upstream OFT), ``causal`` (stock Llama, as RLinf runs
            it) or ``action_block`` (causal prompt, bidirectional action block).
    """

    model_type = "openvla_oft"

    def __init__(
        self,
        model_path: str,
        actions: ActionConfig = ActionConfig(num_action_chunks=8),
        attention_mode: AttentionMode = "bidirectional",
        **kwargs: Any,
    ) -> None:
        attention_mask_4d(torch.ones(1, 2, dtype=torch.long, device="cpu"), 1, attention_mode)  # a bad mode: one line
        super().__init__(model_path, actions=actions, **kwargs)
        self.attention_mode = attention_mode

    def _parallel(self, obs):
        """One forward over ``[prefix, C·D zero slots]``: action logits ``[B, n, n_bins]`` and value hidden."""
        vla = self.vla
        embeds, mask = self._prefix(obs)
        n = self.num_action_tokens
        full = torch.cat([embeds, embeds.new_zeros(embeds.shape[0], n, embeds.shape[2])], dim=1)
        full_mask = torch.cat([mask, mask.new_ones(mask.shape[0], n)], dim=1)
        attn = attention_mask_4d(full_mask, n, self.attention_mode)
        hidden = vla.run_llm(full, full_mask, attn_mask=attn).last_hidden_state
        return self._logits(hidden[:, -n - 1 : -1]), hidden[:, -n - 1]

    def _value_hidden(self, obs):
        if self.attention_mode == "bidirectional":  # the prompt attends to the action slots: full forward
            return self._parallel(obs)[1]
        return super()._value_hidden(obs)  # causal prompt: the prefix alone gives the same hidden state

    def _decode(self, obs, *, do_sample, temperature):
        logits, value_hidden = self._parallel(obs)
        bins, logps = self._choose(logits, do_sample, temperature)
        return bins, logps, self._values(value_hidden)

    def _teacher_logits(self, obs, bins):
        return self._parallel(obs)
