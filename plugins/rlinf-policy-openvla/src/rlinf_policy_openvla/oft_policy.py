"""OpenVLA-OFT for rlinf: all ``C × D`` action tokens decoded in one forward pass (the shared machinery, preprocessing
to export, is :class:`rlinf_policy_openvla.policy._PrismaticPolicy`)."""

from __future__ import annotations

from typing import Literal

import torch

from rlinf_core.models.lora import LoRAConfig
from rlinf_policy_openvla.policy import ValueType, _PrismaticPolicy
from rlinf_policy_openvla.settings import ActionConfig, InputConfig

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
    predicts token 0 and slot ``k`` predicts token ``k + 1``.

    Args:
        model_path: OpenVLA-OFT Hugging Face directory, e.g. ``Haozhan72/Openvla-oft-SFT-libero-spatial-traj1``,
            ``RLinf/RLinf-OpenVLAOFT-LIBERO-90-Base-Lora`` (merged) or a base model for ``lora.path``.
        model_type: optional check, must be ``openvla_oft`` (the seeds' key).
        add_value_head: add a critic on the last prompt token (default: whatever the checkpoint has).
        value_type: ``chunk_level`` (one value ``[B, 1]``) or ``action_level`` (``[B, C]``).
        actions: what one action is (:class:`~rlinf_policy_openvla.settings.ActionConfig`: ``unnorm_key``,
            ``action_dim``, ``num_action_chunks``, ``normalization_type``, ``invert_gripper``).
        inputs: what the model is fed (:class:`~rlinf_policy_openvla.settings.InputConfig`: ``num_images_in_input``,
            ``use_proprio``, ``proprio_dim``, ``max_prompt_length``, ``center_crop``, ``image_resize``).
        lora: train a LoRA adapter instead of the full model (:class:`~rlinf_core.models.lora.LoRAConfig`:
            ``rank``, ``alpha``, ``path`` of an adapter to continue from, ``target_modules``; default
            targets: the vision, projector and LLM layers on the forward path). ``null``: full model.
        precision: ``fp32``; ``bf16`` / ``fp16``: compute under autocast in that dtype with fp32
            trainable weights (fp32 gradients and AdamW state) and frozen weights (LoRA base) stored
            in that dtype; ``bf16-true``: all weights bf16 (warns: small updates round away).
        gradient_checkpointing: recompute activations in the backward instead of keeping them (train
            mode only): the Llama decoder layers (transformers, non-reentrant) and the ViT blocks of the
            vision towers. Saves most activation memory for about one extra forward pass per update.
        attention_mode: ``bidirectional`` (upstream OFT), ``causal`` (stock Llama, as RLinf runs
            it) or ``action_block`` (causal prompt, bidirectional action block).
        top_k: sample from the ``top_k`` most likely bins only, in rollouts, evals and the
            training recompute alike (RLinf's ``sampling_params.top_k``; ``0`` or ``-1``: all bins).
    """

    model_type = "openvla_oft"
    default_chunks = 8

    def __init__(
        self,
        model_path: str,
        model_type: str | None = None,
        add_value_head: bool | None = None,
        value_type: ValueType | None = None,
        actions: ActionConfig = ActionConfig(),
        inputs: InputConfig = InputConfig(),
        lora: LoRAConfig | None = None,
        precision: str = "fp32",
        gradient_checkpointing: bool = False,
        attention_mode: AttentionMode | None = None,
        top_k: int = 0,
    ) -> None:
        super().__init__()
        self.top_k = int(top_k)
        self._setup(
            model_path=model_path,
            model_type=model_type,
            actions=actions,
            inputs=inputs,
            add_value_head=add_value_head,
            value_type=value_type,
            lora=lora,
            precision=precision,
            gradient_checkpointing=gradient_checkpointing,
        )
        restored = self.restore_settings(self.model_path, dict(attention_mode=attention_mode))["attention_mode"]
        self.attention_mode = restored or "bidirectional"
        attention_mask_4d(torch.ones(1, 2, dtype=torch.long, device="cpu"), 1, self.attention_mode)  # validate early

    def settings(self) -> dict:
        return {**super().settings(), "attention_mode": self.attention_mode}

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
