"""``WanWorldModel``: RLinf's action-conditioned Wan 2.2 world model as an :class:`rlinf_core.WorldModel`.

Loads a released directory (``RLinf-Wan-LIBERO-{Spatial,Object,Goal}``) as is::

    model-00001.safetensors   the DiT in DiffSynth ``WanModel`` names (renamed to diffusers at load, strict)
    Wan2.2_VAE.pth            the VAE in the original Wan names
    wan_config.json           optional side-car (absent: the 5 B sizes, 256 px); make_tiny / save_pretrained write it

The reward model (``resnet_rm.pth`` / ``taskemb_resnet_rm.pth``) and the initial states (``dataset/traj*.npy``)
are the env's (:class:`rlinf_core.WorldModelEnv` ``reward_model`` / ``init_data_path``).

One chunk, as upstream's ``WanEnv``: the 5 queued frames (frame 0 of the episode, the reference, plus the 4
newest frames) are encoded to 2 latents; ``5 + C`` raw actions (the 5 condition actions, then the chunk's C)
condition the DiT; ``num_inference_steps`` Euler steps from Gaussian noise with the condition latents re-imposed
after every step; the decoded ``5 + C`` frames' last C are the observations. Then the queue's slots 1-4 take the
last 4 frames and the condition actions' slots 1-4 the last 4 actions; slot 0 keeps the reference frame and the
padding action (zeros, gripper -1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from rlinf_core.contracts import WorldModel
from rlinf_core.models.meta import is_meta_init
from rlinf_core.models.settings import SETTINGS_KEY, SavedSettings
from rlinf_core.models.weights import load_pth_state_dict, load_safetensors
from rlinf_core.world_models import ConditionSpec

# The modules built on diffusers are imported where a model is built or run, not here: `rlinf fit` imports every
# registered class to resolve a config's short names, and diffusers' import (seconds) would slow every run's start.

CONFIG_NAME = "wan_config.json"
DIT_NAME = "model-00001.safetensors"
VAE_NAME = "Wan2.2_VAE.pth"
#: the 5 B release: DiffSynth's Wan2.2-TI2V-5B action config, 256×256 LIBERO frames.
DEFAULT_CONFIG = {
    "dit": {"dim": 3072, "ffn_dim": 14336, "num_heads": 24, "num_layers": 30, "freq_dim": 256},
    "vae": {"base_dim": 160, "decoder_base_dim": 256},
    "image_size": 256,
}
HINT = "a released RLinf-Wan-LIBERO-* directory, or `python -m rlinf_wm_wan.make_tiny DIR`"


def read_config(model_path: Path) -> dict:
    """The side-car config merged over the 5 B defaults (one-line error for unknown keys)."""
    config = json.loads(json.dumps(DEFAULT_CONFIG))
    path = model_path / CONFIG_NAME
    if path.is_file():
        side = json.loads(path.read_text())
        side.pop(SETTINGS_KEY, None)  # the constructor settings save_pretrained recorded (SavedSettings reads them)
        unknown = sorted(set(side) - set(config))
        if unknown:
            raise ValueError(f"{path}: unknown key(s) {unknown}; known: {sorted(config)}")
        for key, value in side.items():
            config[key] = {**config[key], **value} if isinstance(config[key], dict) else value
    return config


class WanWorldModel(SavedSettings, WorldModel):
    """RLinf's Wan 2.2 TI2V-5B world model (DiffSynth fork, KeyFrame-Init Rollout) on diffusers. Built on a
    :meth:`save_pretrained` directory, a setting left at its default takes the value the directory recorded in
    ``wan_config.json`` (:class:`~rlinf_core.models.settings.SavedSettings`).

    Args:
        model_path: the released directory (``model-00001.safetensors``, ``Wan2.2_VAE.pth``, optional
            ``wan_config.json``).
        num_inference_steps: Euler steps per chunk (upstream: 5; 3 or 1 are faster and blurrier).
        noise_seed: seed of a fresh CPU generator for every chunk's noise, as upstream (``seed=0`` on every call:
            the same initial noise for every chunk); ``null``: draw from the env's generator (advanced every chunk).
        precision: ``auto`` (bf16 weights on CUDA as upstream, fp32 on CPU), ``bf16`` or ``fp32``.
        sigma_shift: flow-matching shift (upstream: 5).
        gradient_checkpointing: recompute DiT blocks in the backward pass (world-model fine-tuning at 5 B).
        static_clip_prob: fine-tuning augmentation (upstream ``static_video_prob``, 0.05 in its 5 B recipe): the
            probability that a training clip becomes frame 0 repeated with padding actions, so the model learns
            that no motion keeps the scene still.
    """

    condition = ConditionSpec(5, "first_and_last", pad_gripper=-1.0)
    #: world-model fine-tuning clips (core ``WorldModelTrainer``): 5 condition frames + 8 predicted = 13.
    clip_frames = (5, 8)
    action_dim = 7

    @classmethod
    def settings_file(cls, location: str | Path) -> Path:
        return Path(location) / CONFIG_NAME

    def __init__(
        self,
        model_path: str,
        num_inference_steps: int = 5,
        noise_seed: int | None = 0,
        precision: Literal["auto", "bf16", "fp32"] = "auto",
        sigma_shift: float = 5.0,
        gradient_checkpointing: bool = False,
        static_clip_prob: float = 0.0,
    ) -> None:
        super().__init__()
        if precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"WanWorldModel precision must be auto, bf16 or fp32, got {precision!r}")
        root = Path(model_path)
        meta = is_meta_init()  # architecture only (rlinf memory, config checks): no file is read
        if not meta and not root.is_dir():
            raise FileNotFoundError(f"WanWorldModel model_path {root} is not a directory; expected {HINT}")
        self.model_path = str(root)
        self.num_inference_steps = num_inference_steps
        self.noise_seed = noise_seed
        self.precision = precision
        self.sigma_shift = sigma_shift
        if not 0.0 <= static_clip_prob <= 1.0:
            raise ValueError(f"static_clip_prob must be in [0, 1], got {static_clip_prob}")
        self.static_clip_prob = static_clip_prob
        self.config = read_config(root) if root.is_dir() else json.loads(json.dumps(DEFAULT_CONFIG))
        self.image_size = int(self.config["image_size"])
        from rlinf_wm_wan._modeling import WanActionTransformer
        from rlinf_wm_wan.sampling import inference_scheduler, training_grid
        from rlinf_wm_wan.vae import build_vae

        inference_scheduler(num_inference_steps, sigma_shift)  # validates the step count
        with torch.device("meta"):  # weights are checked against the config before any memory is spent
            self.dit = WanActionTransformer(**self.config["dit"])
            self.vae = build_vae(**self.config["vae"]).requires_grad_(False)
        if not meta:
            self._load(root)
        if gradient_checkpointing:
            self.dit.enable_gradient_checkpointing()
        train_t, train_sigma, train_w = training_grid(sigma_shift)
        self.register_buffer("train_timesteps", train_t, persistent=False)
        self.register_buffer("train_sigmas", train_sigma, persistent=False)
        self.register_buffer("train_weights", train_w, persistent=False)

    # ------------------------------------------------------------------ loading / saving

    def _load(self, root: Path) -> None:
        from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

        from rlinf_wm_wan._modeling import convert_diffsynth_state_dict
        from rlinf_wm_wan.vae import load_vae_state_dict

        shards = sorted(root.glob("model-*.safetensors"))
        if not shards:
            raise FileNotFoundError(f"no DiT weights (model-00001.safetensors) in {root}; expected {HINT}")
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_safetensors(shard))
        state = convert_diffsynth_state_dict(state, self.dit, str(shards[0]))
        file_dtype = next(iter(state.values())).dtype
        self.dit.load_state_dict(state, strict=True, assign=True)
        rope = self.dit.rope  # its tables are non-persistent buffers: rebuild them off the meta device
        self.dit.rope = WanRotaryPosEmbed(rope.attention_head_dim, rope.patch_size, rope.max_seq_len)
        # a bf16 release stays bf16 until the model is moved (fp32 on CPU under precision auto): no fp32 5 B copy
        keep_bf16 = self.precision == "bf16" or (self.precision == "auto" and file_dtype == torch.bfloat16)
        nn.Module.to(self.dit, torch.bfloat16 if keep_bf16 else torch.float32)  # all of it, as upstream
        vae_path = root / VAE_NAME
        if not vae_path.is_file():
            raise FileNotFoundError(f"no VAE weights {vae_path}; expected {HINT}")
        load_vae_state_dict(load_pth_state_dict(vae_path, "VAE weights"), self.vae, str(vae_path))
        nn.Module.to(self.vae.requires_grad_(False), self.dit.dtype)
        left = [n for n, t in [*self.named_parameters(), *self.named_buffers()] if t.is_meta and "train_" not in n]
        if left:  # a tensor no file provided (a diffusers change): fail here, not at the first forward
            raise RuntimeError(f"WanWorldModel: {left[0]!r} was not loaded from {root}")

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the released layout (DiffSynth DiT names, original VAE names, ``wan_config.json`` with the settings
        recorded under ``rlinf``); the reward model files and ``dataset/`` of the source directory are copied along
        when present."""
        from safetensors.torch import save_file

        from rlinf_wm_wan._modeling import diffusers_to_diffsynth_key
        from rlinf_wm_wan.vae import to_original_state_dict

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        dit = {diffusers_to_diffsynth_key(k): v.detach().cpu().contiguous() for k, v in self.dit.state_dict().items()}
        save_file(dit, str(out / DIT_NAME))
        vae = {k: v.detach().cpu().float() for k, v in to_original_state_dict(self.vae).items()}
        torch.save(vae, out / VAE_NAME)
        (out / CONFIG_NAME).write_text(
            json.dumps({**self.config, SETTINGS_KEY: self.settings_record()}, indent=2) + "\n"
        )
        src = Path(self.model_path)
        if src.resolve() != out.resolve():
            for name in ("resnet_rm.pth", "taskemb_resnet_rm.pth"):
                if (src / name).is_file() and not (out / name).exists():
                    shutil.copy2(src / name, out / name)
            if (src / "dataset").is_dir() and not (out / "dataset").exists():
                shutil.copytree(src / "dataset", out / "dataset")
        return out

    # ------------------------------------------------------------------ device / precision

    def to(self, *args, **kwargs):  # type: ignore[override]
        """As ``nn.Module.to``; with ``precision: auto`` the DiT and VAE weights follow the device (bf16 on CUDA)."""
        out = super().to(*args, **kwargs)
        dtype = self.target_dtype
        if self.dit.dtype != dtype:  # nn.Module.to: every weight, no fp32 islands (upstream runs all in bf16)
            nn.Module.to(self.dit, dtype)
            nn.Module.to(self.vae, dtype)
        return out

    @property
    def device(self) -> torch.device:
        return self.dit.device

    def runtime_dtype(self, device_type: str) -> torch.dtype:
        """The weights' dtype on a ``device_type`` device (``rlinf memory``): bf16 for ``bf16``, or ``auto`` on CUDA."""
        if self.precision == "bf16" or (self.precision == "auto" and device_type == "cuda"):
            return torch.bfloat16
        return torch.float32

    @property
    def target_dtype(self) -> torch.dtype:
        """The weights' dtype ``precision`` asks for on the current device (applied by :meth:`to`)."""
        if self.precision == "bf16" or (self.precision == "auto" and self.dit.device.type == "cuda"):
            return torch.bfloat16
        return torch.float32

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype sampling and the loss run in: the weights' (a parent module's ``.to`` moves them without
        calling :meth:`to`, e.g. Lightning moving a ``WorldModelTrainer``; autocast still applies)."""
        return self.dit.dtype

    # ------------------------------------------------------------------ the WorldModel contract

    def init_state(self, frames: torch.Tensor, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Queue ``uint8 [B, 5, S, S, 3]`` (resized to the model's size) and condition actions ``[B, 5, 7]``."""
        if frames.shape[1] != self.condition.num_frames:
            raise ValueError(
                f"WanWorldModel starts from {self.condition.num_frames} condition frames, got {frames.shape[1]}"
            )
        return {"frames": self._resize(frames.to(self.device)), "actions": actions.to(self.device, torch.float32)}

    def predict(self, state, actions, generator=None):
        """Frames ``uint8 [B, C, S, S, 3]`` for raw actions ``[B, C, 7]`` (C a multiple of 4, upstream 8)."""
        C = actions.shape[1]
        if C % 4 or C < 4:
            raise ValueError(
                f"WanWorldModel predicts 4k frames per chunk (5 condition + C = 1 + 4k), got a chunk of {C}"
            )
        acts = torch.cat([state["actions"], actions.to(self.device, torch.float32)], dim=1)  # [B, 5 + C, 7]
        video = self.generate(state["frames"], acts, generator)  # uint8 [B, 5 + C, S, S, 3]
        n = self.condition.num_frames - 1
        frames, cond = state["frames"].clone(), state["actions"].clone()
        frames[:, 1:] = video[:, -n:]
        cond[:, 1:] = acts[:, -n:]
        return video[:, self.condition.num_frames :], {"frames": frames, "actions": cond}

    def select(self, state, env_ids):
        return {k: v[env_ids.to(v.device)] for k, v in state.items()}

    def assign(self, state, env_ids, new):
        out = {k: v.clone() for k, v in state.items()}
        for k in out:
            out[k][env_ids.to(out[k].device)] = new[k].to(out[k].device)
        return out

    # ------------------------------------------------------------------ sampling

    @torch.no_grad()
    def generate(self, frames: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None = None):
        """All ``5 + C`` decoded frames ``uint8 [B, 5 + C, S, S, 3]`` from the queue ``uint8 [B, 5, S, S, 3]`` and
        the ``5 + C`` raw actions ``[B, 5 + C, 7]``."""
        from rlinf_wm_wan.sampling import inference_scheduler
        from rlinf_wm_wan.vae import decode, encode

        dtype = self.compute_dtype
        cond = encode(self.vae, self._to_video(frames, dtype))  # [B, 48, 2, h, w]
        B, Cz, n_cond, h, w = cond.shape
        T = actions.shape[1]
        latents = self._noise((B, Cz, 1 + (T - 1) // 4, h, w), generator).to(dtype)
        latents[:, :, :n_cond] = cond
        scheduler = inference_scheduler(self.num_inference_steps, self.sigma_shift)  # fresh step index
        for t in scheduler.timesteps:
            v = self.dit(latents, t.to(self.device).expand(B), actions, num_clean=n_cond)
            latents = scheduler.step(v, t, latents, return_dict=False)[0]
            latents[:, :, :n_cond] = cond  # the condition latents are re-imposed after every step
        video = decode(self.vae, latents).float()  # [B, 3, T, S, S] in [-1, 1]
        return ((video + 1.0) * 127.5).clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 4, 1).contiguous()

    def _noise(self, shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        if self.noise_seed is not None:  # upstream: seed 0, CPU, float32 on every call
            gen = torch.Generator("cpu").manual_seed(int(self.noise_seed))
            return torch.randn(shape, generator=gen, dtype=torch.float32).to(self.device)
        device = generator.device if generator is not None else self.device
        return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(self.device)

    def _resize(self, frames: torch.Tensor) -> torch.Tensor:
        """``uint8 [B, T, H, W, 3]`` at the model's size (bilinear on [0, 1] floats, as upstream's reset)."""
        S = self.image_size
        if frames.shape[2:4] == (S, S):
            return frames.contiguous()
        B, T, H, W, _ = frames.shape
        x = frames.reshape(B * T, H, W, 3).permute(0, 3, 1, 2).float() / 255.0
        x = F.interpolate(x, size=(S, S), mode="bilinear", align_corners=False)
        return (x * 255.0).clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).reshape(B, T, S, S, 3)

    def _to_video(self, frames: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``uint8 [B, T, H, W, 3]`` → ``[B, 3, T, H, W]`` in [-1, 1] (``x · 2/255 − 1`` as DiffSynth)."""
        return frames.permute(0, 4, 1, 2, 3).to(dtype) * (2.0 / 255.0) - 1.0

    # ------------------------------------------------------------------ fine-tuning (core WorldModelTrainer)

    def training_loss(self, frames: torch.Tensor, actions: torch.Tensor, generator: torch.Generator | None = None):
        """Upstream's DiffSynth loss on 13-frame clips ``uint8 [B, 13, H, W, 3]`` with raw actions ``[B, 13, 7]``.

        Per clip: a timestep from the 1000-point training grid; latents ``(1 − σ) x0 + σ ε``, except latent 0
        (the reference frame) clean and latent 1 (the 4 context frames) noised at grid index 950, both told
        ``t = 0``; target ``ε − x0``; MSE on the predicted latents (2 onward: the last 2 for 13 frames) times
        the grid's loss weight. Action 0 is the padding action (zeros, gripper −1), as in upstream's dataset.
        """
        from rlinf_wm_wan.vae import encode

        if (frames.shape[1] - 1) % 4 or frames.shape[1] < 9:
            raise ValueError(f"Wan training clips have 1 + 4k >= 9 frames (upstream 13), got {frames.shape[1]}")
        frames = self._resize(frames.to(self.device))
        actions = actions.to(self.device, torch.float32).clone()
        gdev = generator.device if generator is not None else torch.device("cpu")
        if self.static_clip_prob > 0:  # upstream's static-video augmentation
            static = (torch.rand(len(frames), generator=generator, device=gdev) < self.static_clip_prob).to(self.device)
            frames = torch.where(static.view(-1, 1, 1, 1, 1), frames[:, :1].expand_as(frames), frames)
            actions[static] = 0.0
            actions[static, :, -1] = self.condition.pad_gripper  # zeros, gripper -1 (open), as upstream
        dtype = self.compute_dtype
        with torch.no_grad():
            x0 = encode(self.vae, self._to_video(frames, dtype)).float()  # [B, 48, F, h, w]
        B = x0.shape[0]
        actions[:, 0] = 0.0
        actions[:, 0, -1] = self.condition.pad_gripper
        ids = torch.randint(0, len(self.train_timesteps), (B,), generator=generator, device=gdev).to(self.device)
        noise = torch.randn(x0.shape, generator=generator, device=gdev).to(self.device)
        sigma = self.train_sigmas[ids].view(B, 1, 1, 1, 1)
        latents = (1 - sigma) * x0 + sigma * noise
        latents[:, :, 0] = x0[:, :, 0]
        small = self.train_sigmas[len(self.train_sigmas) - 50]
        latents[:, :, 1] = (1 - small) * x0[:, :, 1] + small * noise[:, :, 1]
        pred = self.dit(latents.to(dtype), self.train_timesteps[ids], actions, num_clean=2).float()
        per_clip = (pred - (noise - x0))[:, :, 2:].pow(2).mean(dim=(1, 2, 3, 4))
        return (per_clip * self.train_weights[ids]).mean()
