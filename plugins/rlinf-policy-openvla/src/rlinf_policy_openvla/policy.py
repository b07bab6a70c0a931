"""OpenVLA (autoregressive decoding) for rlinf, and the machinery it shares with OpenVLA-OFT (parallel decoding,
:mod:`rlinf_policy_openvla.oft_policy`).

Both read real Hugging Face checkpoint directories (see :mod:`rlinf_policy_openvla.checkpoint`)
and share preprocessing, action tokenisation, the value head, LoRA and export; they differ only
in how the ``C × D`` action tokens are decoded. Log-probs are per token ``[B, C, D]`` under the
temperature-scaled distribution restricted to the action bins.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from rlinf_core.contracts import ActOutput, EvaluateOutput, Observation, Policy
from rlinf_core.models.conventions import open_fraction_to_signed_gripper, signed_gripper_to_open_fraction
from rlinf_core.models.lora import LoRAConfig, apply_lora, merged_state_dict, save_adapter
from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.norm_stats import bounds, normalize_bounds, resolve_unnorm_key
from rlinf_core.models.precision import apply_precision, resolve_precision
from rlinf_core.models.settings import SETTINGS_KEY, SavedSettings
from rlinf_core.models.weights import CheckpointError, copy_side_files, load_weights, save_weights
from rlinf_policy_openvla.action_tokenizer import ActionTokenizer
from rlinf_policy_openvla.checkpoint import (
    TINY_HINT,
    check_model_dir,
    load_official_extra,
    read_spec,
    saved_value_head_outputs,
)
from rlinf_policy_openvla.lora import default_target_modules
from rlinf_policy_openvla.memory import prismatic_profile
from rlinf_policy_openvla.processing import IMAGE_RESIZES, PromptEncoder, pixel_values
from rlinf_policy_openvla.released import announce_image_resize, default_image_resize, write_released_standin
from rlinf_policy_openvla.settings import FLAT_KEYS, ActionConfig, InputConfig

ValueType = Literal["chunk_level", "action_level"]


class _PrismaticPolicy(SavedSettings, Policy):
    """The machinery OpenVLA and OpenVLA-OFT share; subclasses implement ``_decode`` (act) and ``_teacher_logits``
    (evaluate). Built on a :meth:`save_pretrained` directory, a setting left at its default takes the value the
    directory recorded (:class:`~rlinf_core.models.settings.SavedSettings`).

    Args:
        model_path: OpenVLA / OpenVLA-OFT Hugging Face directory (config.json with norm_stats, safetensors,
            tokenizer files), e.g. ``openvla/openvla-7b``, ``gen-robot/openvla-7b-rlvla-warmup``,
            ``Haozhan72/Openvla-oft-SFT-libero-spatial-traj1``, ``RLinf/RLinf-OpenVLAOFT-LIBERO-90-Base-Lora``
            (merged) or a base model for ``lora.path``.
        model_type: optional check, the class's ``model_type`` (RLinf v0.3's config key: ``openvla`` or
            ``openvla_oft``).
        add_value_head: add a critic on the last prompt token (``null``: whatever the checkpoint has).
        value_type: ``chunk_level`` (one value ``[B, 1]``) or ``action_level`` (``[B, C]``); ``null``: what the
            checkpoint's value head gives, else ``chunk_level``.
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
        top_k: sample from the ``top_k`` most likely bins only, in rollouts, evals and the
            training recompute alike (RLinf's ``sampling_params.top_k``; ``0`` or ``-1``: all bins).
    """

    model_type: str
    #: the model reads ``Observation.states`` through a proprio projector and wrist views (OFT)
    takes_proprio_and_wrist: bool = True
    NOT_RECORDED = (*SavedSettings.NOT_RECORDED, "model_type")
    FLAT_SETTINGS = FLAT_KEYS  # flat setting names (RLinf's, rlinf serve's --unnorm-key) → (config group, field)

    @staticmethod
    def released_standin(model_path: str, directory: str) -> str | None:
        """For ``rlinf memory``: a weightless released-form directory of the checkpoint a placeholder
        ``model_path`` names (:func:`rlinf_policy_openvla.released.write_released_standin`), else None."""

        path = write_released_standin(model_path, directory)
        return None if path is None else str(path)

    # ------------------------------------------------------------------ construction
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
        top_k: int = 0,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if model_type is not None and model_type != self.model_type:
            other = {"openvla": "OpenVLAPolicy", "openvla_oft": "OpenVLAOFTPolicy"}.get(model_type)
            hint = f"use class_path: {other}" if other else "valid: 'openvla', 'openvla_oft'"
            raise ValueError(f"{name} has model_type {self.model_type!r}, got {model_type!r}; {hint}")
        if not self.takes_proprio_and_wrist and inputs.use_proprio:
            raise ValueError(f"{name} does not take proprio input; use OpenVLAOFTPolicy with inputs.use_proprio: true")
        if not self.takes_proprio_and_wrist and inputs.num_images_in_input != 1:
            raise ValueError(f"{name} sees one image; use OpenVLAOFTPolicy for inputs.num_images_in_input > 1")
        self.top_k = int(top_k)
        prec = resolve_precision(precision)
        path = check_model_dir(model_path)
        spec = read_spec(path)
        if add_value_head is None:  # neither given nor recorded (RLinf's exports): what the weights hold
            outputs = saved_value_head_outputs(path)
            add_value_head = outputs is not None
            if outputs is not None and value_type is None:
                value_type = "chunk_level" if outputs == 1 else "action_level"
        self.model_path = str(path)
        self.spec = spec

        # --- action statistics, dimensions, chunking
        self.unnorm_key = resolve_unnorm_key(spec.norm_stats, actions.unnorm_key, str(path))
        stats = spec.norm_stats[self.unnorm_key]
        if "action" not in stats:
            raise CheckpointError(f"norm_stats[{self.unnorm_key!r}] of {path} has no 'action' entry")
        self.stats = stats
        vocab = spec.action_vocab_size  # builds text_config's LlamaConfig (its own one-line errors)
        try:
            self.action_tokenizer = ActionTokenizer(
                vocab, spec.n_action_bins, stats["action"], actions.normalization_type
            )
        except (ValueError, TypeError) as exc:  # malformed statistics: name where they come from
            raise CheckpointError(f"norm_stats[{self.unnorm_key!r}]['action'] of {path}: {exc}") from None
        stats_dim = self.action_tokenizer.action_dim
        if actions.action_dim is not None and actions.action_dim != stats_dim:
            raise ValueError(
                f"actions.action_dim={actions.action_dim} but norm_stats[{self.unnorm_key!r}] has {stats_dim} action"
                " dimensions;"
                " drop action_dim or pick the matching unnorm_key"
            )
        self.action_dim = stats_dim
        self.num_action_chunks = int(actions.num_action_chunks)
        self.num_images_in_input = int(inputs.num_images_in_input)
        self.center_crop = bool(inputs.center_crop)
        self.image_resize = inputs.image_resize
        if self.image_resize is None:  # neither given nor recorded: decided from the files, and said so
            self.image_resize, why = default_image_resize(path)
            announce_image_resize(path, self.image_resize, why)
            self.record_settings(inputs={"image_resize": self.image_resize})  # a reload does not guess again
        if self.image_resize not in IMAGE_RESIZES:
            raise ValueError(f"image_resize must be one of {IMAGE_RESIZES}, got {self.image_resize!r}")
        self.invert_gripper = bool(actions.invert_gripper)
        self.normalization_type = actions.normalization_type

        # --- heads
        self.has_value_head = bool(add_value_head)
        self.value_type = value_type or "chunk_level"
        if self.value_type not in ("chunk_level", "action_level"):
            raise ValueError(f"value_type {self.value_type!r} not supported; use 'chunk_level' or 'action_level'")
        value_dim = (1 if self.value_type == "chunk_level" else self.num_action_chunks) if self.has_value_head else None
        self.use_proprio = bool(inputs.use_proprio)
        self.proprio_dim = None
        if self.use_proprio:
            guess = len(stats.get("proprio", {}).get("q01", []))
            self.proprio_dim = int(inputs.proprio_dim or guess or 0)
            if not self.proprio_dim:
                raise ValueError(
                    f"use_proprio=True but norm_stats[{self.unnorm_key!r}] has no proprio stats; set proprio_dim"
                )

        # --- tokenizer and prompts
        self.tokenizer = self._load_tokenizer(path)
        self._check_vocab(spec)
        prompt_length = inputs.max_prompt_length
        self.prompts = PromptEncoder(self.tokenizer, spec.pad_token_id, prompt_length)

        # --- network
        from rlinf_policy_openvla._modeling import build_vla

        # LoRA: the loaded weights stay frozen (stored in the low dtype); full fine-tuning: fp32 masters
        dtype = prec.frozen if lora is not None else prec.trainable
        vla = build_vla(spec, proprio_dim=self.proprio_dim, value_dim=value_dim, meta=True)
        if is_meta_init():  # architecture only: every tensor stays on the meta device, no weight file is read
            vla.to(dtype)
        else:
            self._load_weights(vla, path, dtype)
        for pname, param in vla.named_parameters():
            if pname.startswith(tuple(vla.unused_parameter_prefixes())):
                param.requires_grad_(False)  # never used in forward: keeps DDP free of unused-parameter errors
        self.gradient_checkpointing = bool(gradient_checkpointing)
        vla.set_gradient_checkpointing(self.gradient_checkpointing)

        self.lora = lora
        if lora is not None:
            save = ["value_head"] if self.has_value_head else None
            self.model = apply_lora(vla, lora, default_targets=default_target_modules(vla), modules_to_save=save)
        else:
            self.model = vla
        apply_precision(self.model, prec)  # trainable params fp32 (except bf16-true), frozen ones in the low dtype
        self.precision = prec.name
        self.compute_dtype = prec.compute

    def _load_weights(self, vla, path: Path, dtype: torch.dtype) -> None:
        from rlinf_policy_openvla._modeling import load_into

        state = load_weights(path, hint=TINY_HINT)
        if self.use_proprio and not any(k.startswith("proprio_projector.") for k in state):
            extra = load_official_extra(path, "proprio_projector")
            if extra is None:
                raise CheckpointError(
                    f"use_proprio=True but {path} has no proprio projector weights (proprio_projector.* in the"
                    " safetensors or proprio_projector--*_checkpoint.pt)"
                )
            state.update({f"proprio_projector.{k}": v for k, v in extra.items()})
        load_into(vla, state, str(path), dtype)  # buffers (rotary frequencies) stay float32
        del state

    @staticmethod
    def _load_tokenizer(path: Path):
        from transformers import AutoTokenizer, PreTrainedTokenizerFast

        if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer.model")):
            raise CheckpointError(
                f"{path} has no tokenizer (tokenizer.json or tokenizer.model with tokenizer_config.json); copy the"
                " tokenizer files of the base model into it"
            )
        try:
            if (path / "tokenizer.json").is_file():  # the exact pipeline the checkpoint was trained with
                return PreTrainedTokenizerFast.from_pretrained(str(path))
            return AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:  # noqa: BLE001 - one line with the cause
            raise CheckpointError(
                f"cannot load the tokenizer of {path} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''});"
                " expected tokenizer.json or tokenizer.model with tokenizer_config.json"
            ) from None

    def _check_vocab(self, spec) -> None:
        tok = self.action_tokenizer
        specials = [i for i in (self.tokenizer.bos_token_id, self.tokenizer.eos_token_id) if i is not None]
        if tok.token_begin <= max(specials, default=-1):
            raise CheckpointError(
                f"action ids [{tok.token_begin}, {tok.vocab_size}) overlap special tokens {specials};"
                " check text_config.vocab_size, pad_to_multiple_of and n_action_bins in config.json"
            )
        if spec.pad_token_id < tok.vocab_size and spec.pad_token_id >= tok.token_begin:
            raise CheckpointError(f"pad_token_id {spec.pad_token_id} lies inside the action ids; check config.json")

    @property
    def is_lora(self) -> bool:
        return self.lora is not None

    @property
    def vla(self):
        """The Prismatic network (inside the peft wrapper when LoRA is on)."""
        return self.model.get_base_model() if self.is_lora else self.model

    # ------------------------------------------------------------------ inputs
    def _views(self, obs: Observation) -> list[torch.Tensor]:
        views = [obs.main_images]
        need = self.num_images_in_input - 1
        if need:
            wrist = obs.wrist_images
            if wrist is None:
                raise ValueError(
                    f"num_images_in_input={self.num_images_in_input} needs wrist_images, the env gives none"
                )
            wrist = wrist.unsqueeze(1) if wrist.dim() == 4 else wrist
            if wrist.shape[1] < need:
                raise ValueError(
                    f"num_images_in_input={self.num_images_in_input} needs {need} wrist views, got {wrist.shape[1]}"
                )
            views += [wrist[:, i] for i in range(need)]
        return views

    def _proprio(self, obs: Observation) -> torch.Tensor | None:
        if not self.use_proprio:
            return None
        if obs.states is None or obs.states.shape[-1] != self.proprio_dim:
            got = None if obs.states is None else tuple(obs.states.shape)
            raise ValueError(f"use_proprio=True expects states [B, {self.proprio_dim}], got {got}")
        states = obs.states.to(self.device).float()
        if "proprio" in self.stats and "q01" in self.stats["proprio"]:
            states = normalize_bounds(states, *bounds(self.stats["proprio"], dtype=torch.float32))
        return states

    def _prefix(self, obs: Observation) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.device
        ids, mask = self.prompts(obs.task_descriptions, device)
        size = self.spec.vision[0].image_size
        views = [v.to(device) for v in self._views(obs)]
        pixels = pixel_values(
            views,
            size,
            self.spec.image_means,
            self.spec.image_stds,
            crop=self.center_crop,
            resize=self.image_resize,
            strategy=self.spec.image_resize_strategy,
            fill=self.spec.letterbox_fill,
        )
        return self.vla.build_prefix(ids, mask, pixels, self._proprio(obs))

    # ------------------------------------------------------------------ distributions
    @property
    def num_action_tokens(self) -> int:
        return self.num_action_chunks * self.action_dim

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        tok = self.action_tokenizer
        return self.vla.lm_logits(hidden, tok.token_begin, tok.n_bins)

    def _warp(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """Sampling distribution's logits: ``/ temperature`` then top-k (others ``-inf``), as upstream."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (log-probs use softmax(logits / T)), got {temperature}")
        logits = logits / temperature
        k = self.top_k
        if 0 < k < logits.shape[-1]:
            kth = logits.topk(k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return logits

    def _choose(self, logits: torch.Tensor, do_sample: bool, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Bin indices and their log-probs from ``[..., n_bins]`` logits.

        Greedy or not, the log-probs are under the warped (temperature, top-k) distribution, as :meth:`evaluate`
        computes them.
        """
        logp = F.log_softmax(self._warp(logits, temperature), dim=-1)
        if do_sample:
            flat = logp.reshape(-1, logp.shape[-1]).exp()
            bins = torch.multinomial(flat, 1).view(logp.shape[:-1])
        else:
            bins = logits.argmax(-1)
        return bins, logp.gather(-1, bins.unsqueeze(-1)).squeeze(-1)

    def _values(self, hidden: torch.Tensor) -> torch.Tensor | None:
        return self.vla.values(hidden) if self.has_value_head else None

    def _to_env(self, bins: torch.Tensor) -> torch.Tensor:
        tok = self.action_tokenizer
        actions = tok.unnormalize(tok.bins_to_normalized(bins))
        return open_fraction_to_signed_gripper(actions) if self.invert_gripper else actions

    def _from_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Env-scale expert actions → bin indices (inverse of :meth:`_to_env` up to binning)."""
        a = actions.float()
        if self.invert_gripper:
            a = signed_gripper_to_open_fraction(a)
        tok = self.action_tokenizer
        return tok.normalized_to_bins(tok.normalize(a))

    def _shape(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], self.num_action_chunks, self.action_dim)

    # ------------------------------------------------------------------ Policy API
    @torch.no_grad()
    def value(self, obs: Observation) -> torch.Tensor:
        """Critic values from one forward of the prompt prefix (no action decode)."""
        if not self.has_value_head:
            raise ValueError(f"{type(self).__name__} has no value head (add_value_head: true)")
        return self._values(self._value_hidden(obs))

    def _value_hidden(self, obs: Observation) -> torch.Tensor:
        """Hidden state ``[B, llm_dim]`` of the last prompt token, which the value head reads."""
        embeds, mask = self._prefix(obs)
        return self.vla.run_llm(embeds, mask).last_hidden_state[:, -1]

    def check_prompt(self, prompt: str) -> None:
        """The prompt must fit the LLM's context (``llm_max_length``) beside the image patches and action tokens."""
        context = int(self.spec.raw.get("llm_max_length") or self.spec.llama_config.max_position_embeddings)
        others = self.spec.num_patches * self.num_images_in_input + int(self.use_proprio) + self.num_action_tokens + 1
        self.prompts.check_fits(prompt, context - others)

    @torch.no_grad()
    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        bins, logprobs, values = self._decode(obs, do_sample=do_sample, temperature=temperature)
        bins, logprobs = self._shape(bins), self._shape(logprobs)
        return ActOutput(
            actions=self._to_env(bins),
            logprobs=logprobs,
            values=values,
            record={"action_tokens": self.action_tokenizer.bins_to_tokens(bins)},
        )

    def evaluate(
        self,
        obs: Observation,
        record: dict[str, torch.Tensor],
        *,
        temperature: float = 1.0,
        compute_entropy: bool = False,
        compute_values: bool = False,
    ) -> EvaluateOutput:
        if "action_tokens" not in record:
            raise KeyError(f"record lacks 'action_tokens' (has {sorted(record)}); pass ActOutput.record from act()")
        tokens = record["action_tokens"].to(self.device).long()
        B = tokens.shape[0]
        if tuple(tokens.shape[1:]) != (self.num_action_chunks, self.action_dim):
            raise ValueError(
                f"record['action_tokens'] has shape {tuple(tokens.shape)}, "
                f"expected [B, {self.num_action_chunks}, {self.action_dim}]"
            )
        bins = self.action_tokenizer.tokens_to_bins(tokens).reshape(B, -1)
        logits, value_hidden = self._teacher_logits(obs, bins)
        logp_all = F.log_softmax(self._warp(logits, temperature), dim=-1)
        logprobs = logp_all.gather(-1, bins.unsqueeze(-1)).squeeze(-1)
        entropy = None
        if compute_entropy:
            p = logp_all.exp()
            entropy = self._shape(-(p * torch.where(p > 0, logp_all, torch.zeros_like(logp_all))).sum(-1))
        values = self._values(value_hidden) if compute_values else None
        return EvaluateOutput(logprobs=self._shape(logprobs), entropy=entropy, values=values)

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the expert actions' bins (normalised with the norm stats) over the action bins."""
        expected = (len(obs), self.num_action_chunks, self.action_dim)
        if tuple(actions.shape) != expected:
            raise ValueError(f"sft_loss expects actions {list(expected)} (env scale), got {list(actions.shape)}")
        bins = self._from_env(actions.to(self.device)).reshape(len(obs), -1)
        logits, _ = self._teacher_logits(obs, bins)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), bins.reshape(-1))

    @property
    def image_size(self) -> int:
        """Side of the images the vision backbone takes (the checkpoint's first vision tower)."""
        return self.spec.vision[0].image_size

    def memory_profile(self):
        """Transformer stacks and KV cache of one sample, for ``rlinf memory`` (:mod:`rlinf_core.memory.estimate`)."""

        return prismatic_profile(self)

    # ------------------------------------------------------------------ export
    def state_dict_for_export(self) -> dict[str, torch.Tensor]:
        """Checkpoint-named weights; LoRA deltas merged in (the live model keeps its adapter)."""
        if self.is_lora:
            return merged_state_dict(self.model)
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def save_pretrained(self, path: str | Path, max_shard_bytes: int = 5 * 1024**3) -> None:
        """Write a full checkpoint in the OpenVLA layout (LoRA merged): config.json with norm stats,
        safetensors (sharded above ``max_shard_bytes``), tokenizer and processor files."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_weights(self.state_dict_for_export(), path, max_shard_bytes)
        copy_side_files(self.model_path, path)
        cfg = dict(self.spec.raw)
        cfg["norm_stats"] = self.spec.norm_stats
        cfg[SETTINGS_KEY] = self.settings_record()
        (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    def save_adapter(self, path: str | Path) -> None:
        """Write the peft adapter (``adapter_config.json`` + ``adapter_model.safetensors``, value head included)."""
        if not self.is_lora:
            raise ValueError(f"{type(self).__name__} has no LoRA adapter (lora is null); use save_pretrained")

        save_adapter(self.model, path)

    # ------------------------------------------------------------------ decoding (subclasses)
    def _decode(self, obs, *, do_sample, temperature):
        raise NotImplementedError

    def _teacher_logits(self, obs, bins):
        raise NotImplementedError


class OpenVLAPolicy(_PrismaticPolicy):
    """OpenVLA: action tokens decoded one by one with a KV cache, restricted to the action bins; one camera view,
    no proprio input. Its settings are :class:`_PrismaticPolicy`'s."""

    model_type = "openvla"
    takes_proprio_and_wrist = False

    def _decode(self, obs, *, do_sample, temperature):
        vla = self.vla
        embeds, mask = self._prefix(obs)
        out = vla.run_llm(embeds, mask, use_cache=True)
        hidden = out.last_hidden_state[:, -1]
        values = self._values(hidden)
        position = (mask.long().cumsum(-1) - 1)[:, -1:]
        ones = mask.new_ones(mask.shape[0], 1)
        bins, logps = [], []
        for k in range(self.num_action_tokens):
            b, lp = self._choose(self._logits(hidden), do_sample, temperature)
            bins.append(b)
            logps.append(lp)
            if k + 1 == self.num_action_tokens:
                break
            mask = torch.cat([mask, ones], dim=1)
            position = position + 1
            step = vla.embed_tokens(self.action_tokenizer.bins_to_tokens(b).unsqueeze(1))
            out = vla.run_llm(step, mask, position_ids=position, cache=out.cache, use_cache=True)
            hidden = out.last_hidden_state[:, -1]
        return torch.stack(bins, 1), torch.stack(logps, 1), values

    def _teacher_logits(self, obs, bins):
        """Teacher-forced forward over ``[prefix, a_0 … a_{n-2}]``: logits ``[B, n, n_bins]``, value hidden."""
        vla = self.vla
        embeds, mask = self._prefix(obs)
        n = bins.shape[1]
        given = vla.embed_tokens(self.action_tokenizer.bins_to_tokens(bins[:, :-1]))
        full = torch.cat([embeds, given], dim=1)
        full_mask = torch.cat([mask, mask.new_ones(mask.shape[0], n - 1)], dim=1)
        hidden = vla.run_llm(full, full_mask).last_hidden_state
        return self._logits(hidden[:, -n:]), hidden[:, -n]
