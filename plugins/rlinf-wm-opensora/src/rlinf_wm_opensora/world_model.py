"""``OpenSoraWorldModel``: RLinf's action-conditioned OpenSora (STDiT3 + SDXL VAE + RFLOW) as a core world model.

Loads the released directory (``RLinf/RLinf-OpenSora-LIBERO-{Spatial,Object}``) as is::

    config.json  model-00001.safetensors  model.safetensors.index.json  vae/  dataset_statistics.json
    resnet_rm.pth  dataset/traj*.npy

or as RLinf's own loader reads it: no ``config.json`` (the released STDiT3-XL/2 sizes, or ``dit_config``) and no
index (``model-*.safetensors`` shards found by name), or a training checkpoint of the RLinf/opensora fork
(``epoch*-global_step*/``: ``model/``, ``ema.pt``, ``running_states.json``; the VAE and statistics named by
``vae_path`` / ``stats_path``); one log line says which (see :mod:`rlinf_wm_opensora.layout`).

Semantics (RLinf ``world_model_opensora_env.py``):

- Reset: the 4 condition frames (frame 0 of the init file, repeated) are resized to the model's resolution, mapped
  to ``[-1, 1]`` and encoded frame by frame into the latent queue (``[B, C, 4, h, w]``, the state).
- Each chunk: 8 latents are sampled after the queue with the chunk's actions (normalised with the world model's
  own q01/q99: ``2 (a - q01) / (q99 - q01) - 1`` on all 7 dims, no clipping), 10 RFLOW Euler steps, the
  condition latents re-imposed after every step; the queue becomes the last 4 *generated* latents (never
  re-encoded frames); the 8 latents are decoded into the chunk's uint8 frames.
- Sampler noise: one Gaussian draw per env and chunk from the env's generator. (Upstream's ``RFLOW.sample`` also
  draws a batch-shared noise every step, but its mask logic never applies it: the per-env ``randn`` of the env is
  the only noise that reaches the latents.)
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rlinf_core.contracts import WorldModel
from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.settings import SETTINGS_KEY, SavedSettings
from rlinf_core.models.weights import CheckpointError
from rlinf_core.world_models import ConditionSpec
from rlinf_wm_opensora._modeling import CONDITION_TIMESTEP, STDiT3, STDiT3Config, is_optional_key
from rlinf_wm_opensora.layout import (
    DIT_WEIGHTS,
    RUNNING_STATES,
    is_training_checkpoint,
    load_dit_state,
    resolve_dit_config,
)
from rlinf_wm_opensora.released import RELEASED_CONFIG, SDXL_VAE_CONFIG
from rlinf_wm_opensora.rflow import (
    add_noise,
    masked_velocity_loss,
    rflow_sample,
    sample_logit_normal,
    sampling_timesteps,
    timestep_transform,
)
from rlinf_wm_opensora.vae import WEIGHT_NAMES, build_vae, decode_latents, encode_frames, load_vae

WEIGHTS_NAME = "model-00001.safetensors"
INDEX_NAME = "model.safetensors.index.json"
STATS_NAME = "dataset_statistics.json"
VAE_WEIGHTS_NAME = WEIGHT_NAMES[0]
TINY_HINT = "make a tiny random one with: python -m rlinf_wm_opensora.make_tiny DIR"
log = logging.getLogger(__name__)


class OpenSoraWorldModel(SavedSettings, WorldModel):
    """The OpenSora world model of RLinf (see the module docstring). Built on a :meth:`save_pretrained` directory,
    a setting left at its default takes the value the directory recorded
    (:class:`~rlinf_core.models.settings.SavedSettings`).

    Args:
        model_path: the released (or :meth:`save_pretrained`) directory, or a training checkpoint of the
            RLinf/opensora fork (``epoch*-global_step*/``, which holds the DiT only: give ``vae_path`` and
            ``stats_path``).
        chunk: frames generated per policy chunk (released: 8; ``pad_action_num + chunk`` latent frames per pass).
        num_sampling_steps: RFLOW Euler steps per chunk (released: 10).
        use_timestep_transform: shift the sampling / training timesteps by resolution as upstream (the identity
            at 256², not at tiny sizes).
        image_size: side of the square frames the model works at; None: ``config.json``'s ``image_size``, else 256.
        dit_config: STDiT3 fields for a directory without ``config.json`` (RLinf's layout, sizes from its YAML),
            over the released STDiT3-XL/2 sizes (the default), e.g. ``{depth: 2, hidden_size: 32}``.
        inference_dtype: ``auto`` (bf16 on CUDA, fp32 on CPU), ``bf16`` or ``fp32``: the dtype :meth:`init_state`
            and :meth:`predict` cast the DiT and VAE to (training keeps the trainer's precision).
        vae_micro_batch: frames per VAE encode / decode call (upstream: 64).
        encode_seed: seed of the VAE posterior sample at reset (fixed, so a reset is reproducible).
        gradient_checkpointing: recompute block activations in :meth:`training_loss`.
        vae_path: the VAE directory (diffusers ``AutoencoderKL``); None: ``model_path/vae`` (RLinf's YAML:
            ``world_model_cfg.vae.from_pretrained``).
        stats_path: the ``dataset_statistics.json`` whose action q01/q99 normalise actions; None: the one in
            ``model_path`` (RLinf's YAML: ``world_model_cfg.stats_path``).
        dit_weights: in a fork training checkpoint, ``ema`` (``ema.pt``, what the fork's inference config loads) or
            ``model`` (``model/``, the trained weights in bf16); other layouts have one set of weights.
    """

    #: (condition, generated) frames of a training clip (released: 4 + 8); set per instance from config.json
    clip_frames: tuple[int, int] = (4, 8)
    condition = ConditionSpec(4, "repeat_first")
    #: how this run holds and finds the weights (save_pretrained puts the VAE and statistics in the directory)
    NOT_RECORDED = (
        *SavedSettings.NOT_RECORDED,
        "inference_dtype",
        "vae_micro_batch",
        "dit_config",
        "vae_path",
        "stats_path",
        "dit_weights",
    )

    def __init__(
        self,
        model_path: str,
        chunk: int = 8,
        num_sampling_steps: int = 10,
        use_timestep_transform: bool = True,
        image_size: int | None = None,
        inference_dtype: str = "auto",
        vae_micro_batch: int = 64,
        encode_seed: int = 0,
        gradient_checkpointing: bool = False,
        dit_config: dict[str, Any] | None = None,
        vae_path: str | None = None,
        stats_path: str | None = None,
        dit_weights: str = "ema",
    ) -> None:
        super().__init__()
        if inference_dtype not in ("auto", "bf16", "fp32"):
            raise ValueError(f"inference_dtype must be 'auto', 'bf16' or 'fp32', got {inference_dtype!r}")
        if chunk < 1 or num_sampling_steps < 1:
            raise ValueError(f"chunk and num_sampling_steps must be >= 1, got {chunk} and {num_sampling_steps}")
        if dit_weights not in DIT_WEIGHTS:
            raise ValueError(f"dit_weights must be one of {', '.join(DIT_WEIGHTS)}, got {dit_weights!r}")
        root = Path(model_path)
        meta = is_meta_init()
        released = meta and not root.is_dir()  # a meta build from a placeholder path: the released sizes
        if not root.is_dir() and not released:
            raise FileNotFoundError(f"OpenSora world model directory {root} does not exist; {TINY_HINT}")
        self.model_path = str(root)
        self.vae_path = Path(vae_path) if vae_path else root / "vae"
        self.stats_path = Path(stats_path) if stats_path else root / STATS_NAME
        self.dit_weights = dit_weights
        if not released and is_training_checkpoint(root) and not (self.vae_path.is_dir() and self.stats_path.is_file()):
            raise FileNotFoundError(
                f"{root} is an RLinf/opensora training checkpoint ({RUNNING_STATES}, model/, ema.pt): it holds the DiT "
                f"only; set vae_path (the VAE directory) and stats_path (its dataset_statistics.json), as RLinf's "
                f"world_model_cfg.vae.from_pretrained and stats_path"
            )
        if released:
            known = {f.name for f in fields(STDiT3Config)}
            self.config = STDiT3Config(**{k: v for k, v in RELEASED_CONFIG.items() if k in known})
            raw = RELEASED_CONFIG
        else:
            self.config, raw, config_source = resolve_dit_config(root, dit_config)
        self.image_size = int(image_size or raw.get("image_size") or 256)
        self.chunk = chunk
        self.num_sampling_steps = num_sampling_steps
        self.use_timestep_transform = use_timestep_transform
        self.inference_dtype = inference_dtype
        self.vae_micro_batch = vae_micro_batch
        self.encode_seed = encode_seed
        self.action_dim = self.config.action_dim
        self.condition = ConditionSpec(self.config.pad_action_num, "repeat_first")
        self.clip_frames = (self.config.pad_action_num, chunk)
        if released:
            q01, q99 = -np.ones(self.action_dim, np.float32), np.ones(self.action_dim, np.float32)
        else:
            q01, q99 = read_action_bounds(self.stats_path, self.action_dim)
        self.register_buffer("action_q01", torch.from_numpy(q01), persistent=False)
        self.register_buffer("action_q99", torch.from_numpy(q99), persistent=False)

        if not meta:  # the checkpoint is checked against the sizes before gigabytes of parameters are allocated
            with torch.device("meta"):
                sizes = STDiT3(self.config)
            dit_state, weights_source = checked_dit_state(sizes, root, dit_weights)
        self.dit = STDiT3(self.config)
        self.dit.gradient_checkpointing = gradient_checkpointing
        vae = build_vae(SDXL_VAE_CONFIG) if released else load_vae(self.vae_path, load_weights=not meta)
        self.vae = vae.requires_grad_(False).eval()
        if self.vae.config.latent_channels != self.config.in_channels:
            raise ValueError(
                f"{root}: vae/config.json has {self.vae.config.latent_channels} latent channels, "
                f"config.json's in_channels is {self.config.in_channels}"
            )
        if not meta:
            self.dit.load_state_dict(dit_state, strict=False)
            log.info("OpenSora world model %s: sizes from %s; weights from %s", root, config_source, weights_source)

    # -- helpers -----------------------------------------------------------------------------------
    @property
    def latent_size(self) -> int:
        return self.image_size // 8

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env-scale actions ``[..., A]`` → the model's ``[-1, 1]`` scale (q01/q99 of the world model, no clip)."""
        q01, q99 = self.action_q01.to(actions.device), self.action_q99.to(actions.device)
        return 2 * (actions.float() - q01) / (q99 - q01) - 1

    def runtime_dtype(self, device_type: str) -> torch.dtype:
        """bf16 for ``inference_dtype: bf16``, or ``auto`` on CUDA; fp32 otherwise (``rlinf memory``)."""
        if self.inference_dtype == "bf16" or (self.inference_dtype == "auto" and device_type == "cuda"):
            return torch.bfloat16
        return torch.float32

    def _prepare_inference(self) -> None:
        device = next(self.dit.parameters()).device
        if device.type == "meta":  # memory_profile: already cast to the dtype of the device it estimates
            return
        want = self.runtime_dtype(device.type)
        if self.dit.x_embedder.proj.weight.dtype != want:
            self.dit.to(want)
            torch.nn.Module.to(self.vae, want)  # as upstream, the whole VAE in bf16 (diffusers' .to() would warn)

    def _to_model_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 ``[N, H, W, 3]`` → ``[N, 3, S, S]`` in ``[-1, 1]`` (bilinear resize as upstream when needed)."""
        x = frames.permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-2:] != (self.image_size, self.image_size):
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        return x * 2 - 1

    def _timesteps_transform(self, num_frames: int):
        if not self.use_timestep_transform:
            return None
        return lambda t: timestep_transform(t, self.image_size, self.image_size, num_frames)

    def encode(self, frames: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """uint8 frames ``[B, T, H, W, 3]`` → latents ``[B, C, T, h, w]`` (fp32)."""
        B, T = frames.shape[:2]
        z = encode_frames(self.vae, self._to_model_frames(frames.flatten(0, 1)), self.vae_micro_batch, generator)
        return z.float().unflatten(0, (B, T)).transpose(1, 2)

    def decode_float(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents ``[B, C, T, h, w]`` → the VAE's float32 frames ``[B, T, S, S, 3]``, nominally in ``[-1, 1]``
        (not clamped)."""
        B, _, T = latents.shape[:3]
        x = decode_latents(self.vae, latents.transpose(1, 2).flatten(0, 1), self.vae_micro_batch).float()
        return x.permute(0, 2, 3, 1).unflatten(0, (B, T))

    @staticmethod
    def to_uint8(x: torch.Tensor) -> torch.Tensor:
        """Float frames in ``[-1, 1]`` → uint8 (``(x+1)/2·255``, clamped, truncated: RLinf's ``_wrap_obs``)."""
        return ((x + 1) / 2 * 255).clamp(0, 255).to(torch.uint8)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents ``[B, C, T, h, w]`` → uint8 frames ``[B, T, S, S, 3]`` (``(x+1)/2·255``, clamped, truncated)."""
        return self.to_uint8(self.decode_float(latents))

    def velocity(self, z: torch.Tensor, t: torch.Tensor, actions: torch.Tensor, gen_mask: torch.Tensor) -> torch.Tensor:
        """The DiT's velocity ``[B, C, T, h, w]`` for latents ``z``, timesteps ``t [B]``, normalised actions."""
        out = self.dit(z, t, actions, x_mask=gen_mask, height=self.image_size, width=self.image_size)
        return out[:, : self.config.in_channels]

    # -- WorldModel contract -------------------------------------------------------------------------
    def init_state(self, frames: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The latent queue ``[B, C, 4, h, w]`` of the condition frames ``uint8 [B, 4, H, W, 3]``."""
        Tc = self.condition.num_frames
        if frames.dim() != 5 or frames.shape[1] != Tc or frames.shape[-1] != 3 or frames.dtype != torch.uint8:
            raise ValueError(
                f"OpenSoraWorldModel.init_state takes uint8 condition frames [B, {Tc}, H, W, 3], got "
                f"{frames.dtype} {list(frames.shape)}"
            )
        self._prepare_inference()
        gen = torch.Generator(device="cpu").manual_seed(self.encode_seed)
        return self.encode(frames, gen)

    def predict(self, state: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None = None):
        """Frames ``uint8 [B, chunk, S, S, 3]`` for env-scale actions ``[B, chunk, A]``; the new latent queue."""
        generated, queue = self._sample(state, actions, generator)
        return self.decode(generated), queue

    def predict_with_reward_frames(
        self, state: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None = None
    ):
        """:meth:`predict`, plus the float decoded frames for the reward model, scaled to ``[0, 255]``.

        RLinf's OpenSora env scores ``current_obs``, the VAE's float output, not the uint8 observation
        (RLinf v0.3 rlinf/envs/world_model/world_model_opensora_env.py:584-614; ``ResnetRM.predict_rew`` clamps
        it to ``[-1, 1]``, RLinf/opensora opensora/models/reward_model/resnet_rm.py:91-94). The reward model maps
        ``[0, 255]`` back to ``[-1, 1]`` and clamps, so it sees upstream's input up to float32 rounding.
        """
        generated, queue = self._sample(state, actions, generator)
        x = self.decode_float(generated)
        return self.to_uint8(x), (x + 1) * 127.5, queue

    def _sample(self, state: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None):
        """The chunk's generated latents ``[B, C, chunk, h, w]`` and the new latent queue."""
        if actions.shape[1] != self.chunk:
            raise ValueError(
                f"OpenSoraWorldModel generates {self.chunk} frames per chunk, got {actions.shape[1]} actions"
            )
        self._prepare_inference()
        B, C, Tc, h, w = state.shape
        device = state.device
        gen_device = generator.device if generator is not None else device
        noise = torch.randn(B, C, self.chunk, h, w, generator=generator, device=gen_device).to(device)
        z = torch.cat([state.float(), noise], dim=2)
        gen_mask = torch.zeros(B, Tc + self.chunk, dtype=torch.bool, device=device)
        gen_mask[:, Tc:] = True
        acts = self.normalize_actions(actions.to(device))
        steps = sampling_timesteps(self.num_sampling_steps, B, device, self._timesteps_transform(Tc + self.chunk))
        z = rflow_sample(lambda x, t: self.velocity(x, t, acts, gen_mask), z, gen_mask, steps)
        generated = z[:, :, Tc:]
        queue = torch.cat([state.float(), generated], dim=2)[:, :, -Tc:].contiguous()
        return generated, queue

    def select(self, state: torch.Tensor, env_ids: torch.Tensor) -> torch.Tensor:
        return state[env_ids.to(state.device)]

    def assign(self, state: torch.Tensor, env_ids: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        state = state.clone()
        state[env_ids.to(state.device)] = new.to(state.dtype)
        return state

    # -- training (core's WorldModelTrainer) -------------------------------------------------------------
    def training_loss(
        self, frames: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Rectified-flow loss of one batch of clips (upstream ``RFlowScheduler.training_losses``).

        Args:
            frames: uint8 ``[B, Tc + Tt, H, W, 3]``: ``Tc`` condition frames then ``Tt`` target frames.
            actions: env-scale actions ``[B, Tc + Tt, A]``, entry ``k`` the action that produced frame ``k`` (core's
                ``ClipDataset`` alignment); the model is conditioned on the targets' ``actions[:, Tc:]``
                (upstream ``action_np[s + 1 : s + 9]``).
            generator: source of the timesteps, the noise and the VAE posterior samples.

        Returns:
            Scalar: mean squared error between the predicted velocity and ``x0 - ε`` on the target frames; ``t``
            logit-normal (resolution-shifted), condition frames noised at ``t = 15`` and told so.
        """
        Tc, Tt = self.clip_frames
        if frames.shape[1] != Tc + Tt or actions.shape[1] != Tc + Tt:
            raise ValueError(
                f"OpenSora training clips are {Tc} condition + {Tt} target frames with one action per frame, got "
                f"{frames.shape[1]} frames and {actions.shape[1]} actions"
            )
        actions = actions[:, Tc:]
        B, device = frames.shape[0], frames.device
        with torch.no_grad():
            x0 = self.encode(frames, generator)
        t = sample_logit_normal(B, device, generator)
        if self.use_timestep_transform:
            t = timestep_transform(t, self.image_size, self.image_size, Tc + Tt)
        gen_device = generator.device if generator is not None else device
        noise = torch.randn(x0.shape, generator=generator, device=gen_device).to(device)
        gen_mask = torch.zeros(B, Tc + Tt, dtype=torch.bool, device=device)
        gen_mask[:, Tc:] = True
        x_t = torch.where(
            gen_mask[:, None, :, None, None],
            add_noise(x0, noise, t),
            add_noise(x0, noise, torch.full_like(t, CONDITION_TIMESTEP)),
        )
        v = self.velocity(x_t, t, self.normalize_actions(actions), gen_mask)
        return masked_velocity_loss(v, x0 - noise, gen_mask)

    def save_pretrained(self, path: str | Path) -> None:
        """Write a directory this class loads unchanged: config.json (the settings recorded under ``rlinf``),
        ``model-00001.safetensors`` + index, vae/ (the in-memory VAE, fp32), dataset_statistics.json and, copied from
        the source directory, resnet_rm.pth and dataset/."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        src = Path(self.model_path)
        self.config.to_json(path / "config.json", image_size=self.image_size, **{SETTINGS_KEY: self.settings_record()})
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.dit.state_dict().items()}
        save_file(state, str(path / WEIGHTS_NAME), metadata={"format": "pt"})
        index = {
            "metadata": {"total_size": sum(v.numel() * 4 for v in state.values())},
            "weight_map": {k: WEIGHTS_NAME for k in sorted(state)},
        }
        (path / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        self.vae.save_config(path / "vae")
        vae_state = {k: v.detach().float().cpu().contiguous() for k, v in self.vae.state_dict().items()}
        save_file(vae_state, str(path / "vae" / VAE_WEIGHTS_NAME), metadata={"format": "pt"})
        if self.stats_path.is_file() and self.stats_path.resolve() != (path / STATS_NAME).resolve():
            shutil.copy2(self.stats_path, path / STATS_NAME)
        if src.resolve() != path.resolve():
            if (src / "resnet_rm.pth").is_file():
                shutil.copy2(src / "resnet_rm.pth", path / "resnet_rm.pth")
            if (src / "dataset").is_dir():
                shutil.copytree(src / "dataset", path / "dataset", dirs_exist_ok=True)


def read_action_bounds(path: Path, action_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """q01 / q99 of ``dataset_statistics.json`` (``{"action": {"q01": [...], "q99": [...], ...}}``)."""
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in {path.parent}: the world model normalises actions with its q01/q99")
    stats = json.loads(path.read_text())
    action = stats.get("action")
    if not isinstance(action, dict) or "q01" not in action or "q99" not in action:
        raise ValueError(f"{path}: expected {{'action': {{'q01': [...], 'q99': [...]}}}}, got keys {sorted(stats)}")
    q01, q99 = (np.asarray(action[k], np.float32).reshape(-1) for k in ("q01", "q99"))
    if q01.shape != (action_dim,) or q99.shape != (action_dim,):
        raise ValueError(f"{path}: action q01/q99 have {q01.size}/{q99.size} entries, the model takes {action_dim}")
    if np.any(q99 <= q01):
        bad = np.flatnonzero(q99 <= q01).tolist()
        raise ValueError(f"{path}: action q99 must exceed q01 on every dim (dims {bad})")
    return q01, q99


def checked_dit_state(dit: STDiT3, root: Path, dit_weights: str = "ema") -> tuple[dict[str, torch.Tensor], str]:
    """The released STDiT3 weights under ``root``, checked key by key and shape by shape against ``dit`` (which may
    live on the meta device; keys of the unused text pathway / RoPE may be absent), and which files were read."""
    state, source = load_dit_state(root, hint=TINY_HINT, dit_weights=dit_weights)
    expected = dit.state_dict()
    missing = sorted(k for k in expected if k not in state and not is_optional_key(k))
    unexpected = sorted(k for k in state if k not in expected)
    if missing or unexpected:
        key = (missing or unexpected)[0]
        what = "is missing from the checkpoint" if missing else "is not an STDiT3 parameter"
        raise CheckpointError(
            f"{root}: key {key!r} {what} ({len(missing)} missing, {len(unexpected)} unexpected); expected the "
            f"released STDiT3 layout (spatial_blocks.N.*, temporal_blocks.N.*, action_embedder.*, t_block.1.*, ...) "
            f"for the model's sizes (depth {dit.config.depth}, hidden {dit.config.hidden_size}; config.json, else the "
            f"released STDiT3-XL/2 or dit_config)"
        )
    for k, v in state.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise CheckpointError(
                f"{root}: tensor {k!r} has shape {list(v.shape)}, the model's sizes (depth {dit.config.depth}, hidden "
                f"{dit.config.hidden_size}) build {list(expected[k].shape)}; without config.json, pass dit_config"
            )
    return state, source
