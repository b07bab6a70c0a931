"""π0 / π0.5 as an rlinf policy: flow-matching action chunks with RLinf's noise-injected log-probs.

``act`` computes the prefix KV cache once (images + prompt), runs the N-step denoising chain of
:class:`~rlinf_policy_openpi.sampler.FlowSampler` over it and returns the first ``C × D`` of the ``H × 32``
normalised actions, un-normalised. The record holds the chain, the stochastic step and the noise level;
``evaluate`` rebuilds the prefix from the stored observation and recomputes the log-probs of that step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from torch import nn

from rlinf_core.contracts import ActOutput, EvaluateOutput, MemoryProfile, Observation, Policy, Stack
from rlinf_core.models.lora import LoRAConfig, apply_lora, merged_state_dict
from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.precision import apply_precision, resolve_precision
from rlinf_core.models.settings import SETTINGS_KEY, SavedSettings
from rlinf_core.models.weights import CheckpointError, save_weights
from rlinf_policy_openpi import flow
from rlinf_policy_openpi.checkpoint import EMBED_KEY, load_model, read_norm_stats, write_norm_stats
from rlinf_policy_openpi.heads import (
    DEFAULT_VALUE_HIDDEN,
    ExploreNoiseNet,
    ValueHead,
    load_head,
    value_hidden_sizes_from,
)
from rlinf_policy_openpi.inputs import ObservationInputs
from rlinf_policy_openpi.released import write_released_standin
from rlinf_policy_openpi.sampler import FlowSampler
from rlinf_policy_openpi.settings import FLAT_KEYS, CriticConfig, InputConfig, NoiseConfig
from rlinf_policy_openpi.transforms import TOKENIZER_FILE, default_image_resize, find_tokenizer, normalize, pad_to_dim

VLM_PREFIX = "paligemma_with_expert.paligemma."
GREEDY_SEED = 0  #: the fixed initial noise of do_sample=False (deterministic ODE)


class OpenPIPolicy(SavedSettings, Policy):
    """π0 / π0.5 (openpi) with RLinf's flow-SDE / flow-noise / flow-CPS RL log-probs; π0 vs π0.5 is read
    from the checkpoint. Built on a :meth:`save_pretrained` directory, a setting left at its default takes the value
    the directory recorded (:class:`~rlinf_core.models.settings.SavedSettings`).

    Args:
        model_path: checkpoint directory: openpi PyTorch (``model.safetensors`` + ``config.json`` +
            ``assets/<asset_id>/norm_stats.json``), lerobot-named, or RLinf's ``RLinf-Pi0-*`` / ``RLinf-Pi05-*``
            (``<asset_id>/norm_stats.json``, optional ``value_head.*`` / ``noise_head.*``), or one written by
            :meth:`save_pretrained`.
        action_dim: env action dimensions D, the first D of the model's 32 (MetaWorld 4); ``null``: the size of
            the checkpoint's action statistics.
        num_action_chunks: C, actions executed per chunk: the first C of the H predicted (``null``: H).
        num_steps: N denoise steps of every act.
        add_value_head: add the critic (``null``: whatever the checkpoint has).
        noise: the stochastic denoise step (:class:`~rlinf_policy_openpi.settings.NoiseConfig`: method, level,
            anneal, ...).
        critic: where the critic reads and its widths (:class:`~rlinf_policy_openpi.settings.CriticConfig`:
            after_vlm, vlm_mode, detach_input, ...).
        inputs: what the model is fed (:class:`~rlinf_policy_openpi.settings.InputConfig`: num_images_in_input,
            asset_id, discrete_state_input, tokenizer_path, image_resize).
        train_expert_only: freeze PaliGemma (SigLIP + projector + Gemma-2B); the action expert, the action /
            state / time projections and the heads train (RLinf's default).
        lora: LoRA adapters on PaliGemma (SigLIP, projector, Gemma layers), as RLinf wraps only the VLM; the action
            expert and projections train in full. ``null``: no adapters.
        precision: ``fp32`` | ``bf16`` | ``fp16`` | ``bf16-true`` (see :mod:`rlinf_core.models.precision`): with
            ``bf16`` the frozen VLM is stored in bf16 and trainable weights stay fp32.
        gradient_checkpointing: recompute every VLM / expert layer in the backward (train mode).
    """

    FLAT_SETTINGS = FLAT_KEYS  # RLinf's flat setting names → (config group, field): hints, rlinf serve overrides

    @staticmethod
    def released_standin(model_path: str, directory: str) -> str | None:
        """For ``rlinf memory``: a weightless released-form directory of the checkpoint a placeholder
        ``model_path`` names (:func:`rlinf_policy_openpi.released.write_released_standin`), else None."""

        path = write_released_standin(model_path, directory)
        return None if path is None else str(path)

    def __init__(
        self,
        model_path: str,
        action_dim: int | None = None,
        num_action_chunks: int | None = None,
        num_steps: int = 10,
        add_value_head: bool | None = None,
        noise: NoiseConfig = NoiseConfig(),
        critic: CriticConfig = CriticConfig(),
        inputs: InputConfig = InputConfig(),
        train_expert_only: bool = True,
        lora: LoRAConfig | None = None,
        precision: str = "fp32",
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()

        prec = resolve_precision(precision)
        path = Path(model_path)
        self.sampler = FlowSampler(num_steps, noise.method, noise.joint_logprob, noise.ignore_last)
        self.model_path = str(path)
        overrides = (
            {} if inputs.discrete_state_input is None else {"discrete_state_input": bool(inputs.discrete_state_input)}
        )
        model, ckpt = load_model(path, **overrides)
        self.config = config = model.config
        self.is_pi05 = config.pi05
        self._set_inputs(path, inputs, ckpt.layout)
        self.action_dim = int(action_dim or self.inputs.action_dim)
        if not 1 <= self.action_dim <= config.action_dim:
            raise ValueError(
                f"action_dim must be 1..{config.action_dim} (the model's padded width), got {self.action_dim}"
            )
        self.num_action_chunks = int(num_action_chunks or config.action_horizon)
        if not 1 <= self.num_action_chunks <= config.action_horizon:
            raise ValueError(
                f"num_action_chunks must be 1..{config.action_horizon} (the checkpoint's action_horizon), "
                f"got {self.num_action_chunks}"
            )
        self.noise_level = noise.level
        self.noise_anneal = noise.anneal
        self.noise_params = noise.anneal_params
        self.noise_logvar_range = noise.logvar_range
        self.detach_critic_input = critic.detach_input
        self.chunk_critic_input = critic.chunk_input
        self.value_after_vlm = critic.after_vlm
        self.value_vlm_mode = critic.vlm_mode
        self.train_expert_only = bool(train_expert_only)
        self.rl_step = 0
        self._add_heads(model, ckpt, critic, add_value_head)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.lora = lora
        self.model = self._set_trainable(model)
        apply_precision(self.model, prec)
        self.precision = prec.name
        self.compute_dtype = prec.compute
        # save_pretrained writes openpi's layout, whose default image resize may not be the source layout's
        self.record_settings(inputs={"image_resize": self.image_resize})

    def _set_inputs(self, path: Path, inputs: InputConfig, layout: str) -> None:

        if not 1 <= inputs.num_images_in_input <= self.config.num_images:
            raise ValueError(
                f"num_images_in_input must be 1..{self.config.num_images}, got {inputs.num_images_in_input}"
            )
        self.num_images_in_input = int(inputs.num_images_in_input)
        self.asset_id = inputs.asset_id
        try:
            self.tokenizer_path = str(find_tokenizer(path, inputs.tokenizer_path))
        except CheckpointError:
            if not is_meta_init():
                raise
            self.tokenizer_path = None  # architecture only (rlinf memory, config checks): no prompt is tokenised
        self.image_resize = inputs.image_resize or default_image_resize(layout)
        self.inputs = ObservationInputs(
            self.config, read_norm_stats(path, inputs.asset_id), self.tokenizer_path, self.image_resize
        )

    def _add_heads(self, model: nn.Module, ckpt, critic: CriticConfig, enabled: bool | None) -> None:
        """The value / explore-noise heads (RLinf names), loaded from the checkpoint's optional tensors."""
        config, heads = self.config, ckpt.heads
        has_saved_value = bool(heads.get("value_head"))
        if enabled is None:  # neither given nor recorded: the tensors say
            enabled = has_saved_value
        self.has_value_head = bool(enabled)
        if self.has_value_head:
            saved_hidden = value_hidden_sizes_from(heads.get("value_head", {}))
            hidden = tuple(critic.hidden_sizes or saved_hidden or DEFAULT_VALUE_HIDDEN)
            width = config.vlm_width if self.value_after_vlm else config.expert_width
            model.value_head = ValueHead(width, hidden)
            if has_saved_value and not is_meta_init():
                load_head(model.value_head, heads["value_head"], "value_head", str(ckpt.path))
        if self.noise_method == "flow_noise":
            model.noise_head = ExploreNoiseNet(
                config.expert_width, config.action_dim, noise_logvar_range=self.noise_logvar_range
            )
            if heads.get("noise_head") and not is_meta_init():
                load_head(model.noise_head, heads["noise_head"], "noise_head", str(ckpt.path))

    def _set_trainable(self, model: nn.Module) -> nn.Module:
        """Freeze what does not train, wrap PaliGemma with LoRA; returns the module ``self.model`` holds."""
        model.prefix_output_read = self.value_after_vlm
        model.gradient_checkpointing = self.gradient_checkpointing
        unused = model.unused_parameter_prefixes()
        for name, p in model.named_parameters():
            if name.startswith(unused) or (self.train_expert_only and name.startswith(VLM_PREFIX)):
                p.requires_grad_(False)  # frozen, or never reached by a gradient (DDP would wait for it)
        if self.lora is None:
            return model

        wrapped = apply_lora(model, self.lora, default_targets=default_lora_targets())
        for name, p in model.named_parameters():  # RLinf wraps only PaliGemma: the rest trains in full
            if not name.startswith(VLM_PREFIX) and ".lora_" not in name and not name.startswith(unused):
                p.requires_grad_(True)
        return wrapped

    # ------------------------------------------------------------------ structure
    @property
    def is_lora(self) -> bool:
        return self.lora is not None

    @property
    def openpi(self) -> nn.Module:
        """The :class:`~rlinf_policy_openpi._modeling.OpenPIModel` (inside the peft wrapper with LoRA)."""
        return self.model.get_base_model() if self.is_lora else self.model

    @property
    def noise_method(self) -> str:
        return self.sampler.noise_method

    @property
    def num_steps(self) -> int:
        return self.sampler.num_steps

    def set_rl_step(self, step: int) -> None:
        self.rl_step = int(step)

    def current_noise_level(self) -> float:
        """The flow_sde / flow_cps noise level of this RL step (annealed with ``noise_anneal``)."""
        if self.noise_anneal:
            return flow.annealed_noise_level(self.rl_step, *self.noise_params)
        return self.noise_level

    def train(self, mode: bool = True):
        super().train(mode)
        if self.train_expert_only and not self.is_lora:
            self.openpi.paligemma_with_expert.paligemma.eval()  # frozen: never in train mode (RLinf's freeze_vlm)
        return self

    # ------------------------------------------------------------------ inputs
    @property
    def num_prefix_slots(self) -> int:
        """Camera slots in the prefix: all the model's (the unfed ones black and masked, as openpi / RLinf) when
        the critic reads the VLM's output, whose padded language positions attend to masked slots too; else only
        the fed ones, which gives the same velocities and expert values (no valid token attends to a masked slot)."""
        return self.config.num_images if self.has_value_head and self.value_after_vlm else self.num_images_in_input

    def _prefix(self, obs: Observation):
        """The prefix KV cache of ``obs`` (images + prompt) and the normalised padded state ``[B, 32]``."""
        batch = self.inputs(obs, self.num_images_in_input, self.device, self.num_prefix_slots)
        cache = self.openpi.prefix_cache(batch.images, batch.image_masks, batch.tokens, batch.token_masks, batch.state)
        return cache

    def _denoiser(self, cache):
        model = self.openpi

        def denoise(x_t: torch.Tensor, t: torch.Tensor):
            v, feats = model.suffix_forward(cache, None, x_t, t.expand(x_t.shape[0]) if t.dim() == 0 else t)
            return v.float(), feats.float()

        return denoise

    def _noise_std_fn(self):
        return self.openpi.noise_head if self.noise_method == "flow_noise" else None

    def _initial_noise(self, batch: int, do_sample: bool) -> torch.Tensor:
        shape = (batch, self.config.action_horizon, self.config.action_dim)
        if do_sample:
            return torch.randn(shape, device=self.device)
        gen = torch.Generator().manual_seed(GREEDY_SEED)  # deterministic ODE: a fixed draw, same on every device
        return torch.randn(shape, generator=gen).to(self.device)

    # ------------------------------------------------------------------ critic
    def _values(self, cache) -> torch.Tensor | None:
        """Critic values ``[B, 1]``: the VLM's prefix output (``value_after_vlm``), or the action expert's output
        at the noise mean ``x_1 = 0``, ``t = 1`` (a deterministic function of the observation)."""
        if not self.has_value_head:
            return None
        model = self.openpi
        if self.value_after_vlm:
            feats = self._vlm_value_features(cache)
        else:
            B = cache.pad_mask.shape[0]
            x = torch.zeros(B, self.config.action_horizon, self.config.action_dim, device=self.device)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.detach_critic_input):
                _, suffix = model.suffix_forward(cache, None, x, torch.ones(B, device=self.device))
            suffix = suffix[:, : self.num_action_chunks] if self.chunk_critic_input else suffix
            feats = suffix.float().mean(dim=1)
        if self.detach_critic_input:
            feats = feats.detach()
        return model.value_head(feats.to(model.value_head.mlp[0].weight.dtype)).float()

    def _vlm_value_features(self, cache) -> torch.Tensor:
        """The VLM's prefix output ``[B, P, vlm_width]`` → ``[B, vlm_width]`` per ``value_vlm_mode``, as RLinf's
        ``get_value_from_vlm`` (RLinf v0.3 ``rlinf/models/embodiment/openpi/openpi_action_model.py``): the prefix is
        all the model's camera slots then ``max_token_len`` language positions; ``mean_token`` averages the first
        ``num_images_in_input`` slots' tokens and every language position (padding included), ``first_token`` /
        ``last_token`` read prefix position 0 / P - 1."""
        out = cache.prefix_out
        if self.value_vlm_mode == "first_token":
            return out[:, 0].float()
        if self.value_vlm_mode == "last_token":
            return out[:, -1].float()
        fed = self.num_images_in_input * self.config.num_image_tokens
        return torch.cat([out[:, :fed], out[:, cache.image_len :]], dim=1).float().mean(dim=1)

    @torch.no_grad()
    def value(self, obs: Observation) -> torch.Tensor:
        """Critic values ``[B, 1]`` from the prefix pass (and one expert pass for the expert critic)."""
        if not self.has_value_head:
            raise ValueError(f"{type(self).__name__} has no value head (add_value_head: true)")
        return self._values(self._prefix(obs))

    # ------------------------------------------------------------------ Policy API
    @torch.no_grad()
    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (it scales the injected noise's std), got {temperature}")
        cache = self._prefix(obs)
        B = len(obs)
        level = self.current_noise_level()
        out = self.sampler.sample(
            self._denoiser(cache),
            self._initial_noise(B, do_sample),
            do_sample=do_sample,
            temperature=temperature,
            noise_level=level,
            noise_std_fn=self._noise_std_fn(),
        )
        C, D = self.num_action_chunks, self.action_dim
        actions = self.inputs.unnormalize_actions(out.actions[:, :C], D)
        return ActOutput(
            actions=actions.float(),
            logprobs=out.logprobs[:, :C, :D].float(),
            values=self._values(cache),
            record={
                "chains": out.chains.float(),
                "denoise_inds": out.denoise_inds,
                "noise_level": torch.full((B,), level, device=self.device),
            },
        )

    def evaluate(self, obs, record, *, temperature=1.0, compute_entropy=False, compute_values=False) -> EvaluateOutput:
        cache = self._prefix(obs)
        B = len(obs)
        level = record.get("noise_level", torch.full((B,), self.current_noise_level(), device=self.device))
        logp, ent = self.sampler.logprob(
            self._denoiser(cache),
            record["chains"].float(),
            record["denoise_inds"].long(),
            temperature=temperature,
            noise_level=level.float(),
            noise_std_fn=self._noise_std_fn(),
        )
        C, D = self.num_action_chunks, self.action_dim
        return EvaluateOutput(
            logprobs=logp[:, :C, :D],
            entropy=ent[:, :C, :D] if compute_entropy else None,
            values=self._values(cache) if compute_values else None,
        )

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        """openpi's flow-matching loss for expert ``actions [B, C, D]`` (env scale): ``‖v(x_t, t) − (ε − a)‖²`` with
        ``x_t = t·ε + (1 − t)·a``, ``t ~ 0.999·Beta(1.5, 1) + 0.001``, ``a`` the normalised actions zero-padded to 32
        (as openpi pads them); mean over the C given action tokens (the other H − C are not supervised)."""

        B, C, D = actions.shape
        if C > self.config.action_horizon or D != self.action_dim:
            raise ValueError(
                f"sft_loss expects actions [B, <= {self.config.action_horizon}, {self.action_dim}], "
                f"got {list(actions.shape)}"
            )
        a = normalize(actions.to(self.device).float(), self.inputs.stats["actions"], self.inputs.quantile)
        target = torch.zeros(B, self.config.action_horizon, self.config.action_dim, device=self.device)
        target[:, :C] = pad_to_dim(a, self.config.action_dim)
        eps = torch.randn_like(target)
        t = torch.distributions.Beta(1.5, 1.0).sample((B,)).to(self.device) * 0.999 + 0.001
        x_t = t.view(B, 1, 1) * eps + (1 - t.view(B, 1, 1)) * target
        v, _ = self.openpi.suffix_forward(self._prefix(obs), None, x_t, t)
        return ((v.float() - (eps - target))[:, :C] ** 2).mean()

    def memory_profile(self):
        """The stacks one ``evaluate`` sample runs through, for ``rlinf memory``: SigLIP + the VLM over the prefix
        when PaliGemma trains (frozen: no activations kept), the expert over the suffix once per pass (step k, the
        critic pass unless detached; N with ``joint_logprob``), the prefix keys / values each pass's attention keeps,
        and the rollout's prefix KV cache."""

        cfg, ckpt = self.config, self.gradient_checkpointing
        rank = (self.lora.rank if self.lora.path is None else 32) if self.is_lora else 0
        images = self.num_prefix_slots * cfg.num_image_tokens
        prefix = images + cfg.max_token_len
        stacks = []
        if self.is_lora or not self.train_expert_only:
            v, g = cfg.vision, cfg.vlm
            stacks.append(
                Stack(
                    "vision.siglip",
                    "vit",
                    v.depth,
                    images,
                    v.width,
                    v.mlp_dim,
                    v.num_heads,
                    lora_rank=rank,
                    checkpointed=ckpt,
                )
            )
            stacks.append(
                Stack(
                    "vlm", "llama", g.depth, prefix, g.width, g.mlp_dim, g.num_heads, lora_rank=rank, checkpointed=ckpt
                )
            )
        passes = self.num_steps if self.sampler.joint_logprob else 1
        if self.has_value_head and not self.value_after_vlm and not self.detach_critic_input:
            passes += 1
        e = cfg.expert
        stacks.append(
            Stack(
                "expert", "llama", e.depth, cfg.suffix_len * passes, e.width, e.mlp_dim, e.num_heads, checkpointed=ckpt
            )
        )
        kv_width = cfg.vlm.num_kv_heads * cfg.vlm.head_dim
        kept = 2 * kv_width * (prefix + cfg.suffix_len) * e.depth * passes  # k, v per expert layer and pass
        other = {"fp32": 4 * kept, "mixed": 2 * kept, "bf16": 2 * kept}
        return MemoryProfile(
            tuple(stacks), other, kv_cache_tokens=prefix, kv_cache_width=kv_width, kv_cache_layers=cfg.vlm.depth
        )

    # ------------------------------------------------------------------ export
    def state_dict_for_export(self) -> dict[str, torch.Tensor]:
        """openpi-named weights without the tied ``embed_tokens`` (as openpi saves them), the heads as
        ``value_head.*`` / ``noise_head.*`` (RLinf's names); LoRA deltas merged in."""

        if self.is_lora:
            state = merged_state_dict(self.model)
        else:
            state = {k: v.detach() for k, v in self.model.state_dict().items()}
        return {k: v for k, v in state.items() if k != EMBED_KEY}

    def save_pretrained(self, path: str | Path) -> None:
        """An RLinf-Pi0-style directory that :meth:`from_pretrained` (and RLinf) load: ``model.safetensors``,
        ``config.json`` (openpi form + the policy settings under ``rlinf``), ``assets/<asset_id>/norm_stats.json``
        and the tokenizer."""

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_weights(self.state_dict_for_export(), path)
        cfg = {**self.config.to_json(), SETTINGS_KEY: self.settings_record()}
        (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        write_norm_stats(path / "assets" / (self.asset_id or "default"), self.inputs.stats)
        if self.tokenizer_path and Path(self.tokenizer_path).resolve() != (path / TOKENIZER_FILE).resolve():
            shutil.copyfile(self.tokenizer_path, path / TOKENIZER_FILE)


def default_lora_targets() -> str:
    """PaliGemma's linears on the forward path: Gemma attention / MLP, SigLIP attention / MLP, the projector."""
    return (
        r".*paligemma\.model\.("
        r"language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
        r"|vision_tower\.vision_model\.encoder\.layers\.\d+\.(self_attn\.(q|k|v|out)_proj|mlp\.fc[12])"
        r"|multi_modal_projector\.linear)"
    )


__all__ = ["OpenPIPolicy", "default_lora_targets"]
