"""openpi's input / output pipeline for π0 / π0.5, in torch (``openpi/transforms.py``, ``image_tools.py``,
``models/tokenizer.py``).

- images: uint8 ``[B, H, W, 3]`` → resized with padding to 224 the checkpoint's way (:func:`default_image_resize`:
  PIL bilinear as openpi's ``openpi_client.image_tools.resize_with_pad`` for openpi / RLinf checkpoints, lerobot's
  float ``F.interpolate`` for lerobot ones) → [-1, 1] ``[B, 3, 224, 224]``; 3 camera slots, a missing camera is
  black with mask False;
- state / actions: normalised (z-score for π0, quantile for π0.5, the 1e-6 epsilons), then zero-padded to 32;
- prompt: PaliGemma SentencePiece ``encode(clean(text), add_bos) + encode("\\n")`` padded with id 0 to
  ``max_token_len`` (48 π0 / 200 π0.5); π0.5 with ``discrete_state_input`` writes the state as 256-bin tokens.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from rlinf_core.models.weights import CheckpointError
from rlinf_policy_openpi.checkpoint import NormStats

TOKENIZER_FILE = "paligemma_tokenizer.model"
TOKENIZER_URL = "gs://big_vision/paligemma_tokenizer.model"  # where openpi downloads it from (anonymous GCS)
EPS = 1e-6


# ---- images ------------------------------------------------------------------------------------------
ImageResize = Literal["pil", "lerobot"]
IMAGE_RESIZES: tuple[str, ...] = ("pil", "lerobot")


def default_image_resize(layout: str) -> ImageResize:
    """The resize a checkpoint was trained with, from its layout (``checkpoint.OpenPICheckpoint.layout``):
    openpi (JAX and PyTorch alike) and RLinf resize in the data transforms with PIL (openpi ``ResizeImages`` →
    ``openpi_client.image_tools.resize_with_pad``; the models' own resize is then a no-op), lerobot inside the
    policy with ``F.interpolate`` on float frames (``policies/common/vla_utils.py`` ``resize_with_pad_torch``)."""
    return "lerobot" if layout == "lerobot" else "pil"


def check_image_resize(resize: str) -> None:
    if resize not in IMAGE_RESIZES:
        raise ValueError(f"image_resize {resize!r} not supported; use {' or '.join(IMAGE_RESIZES)}")


def _channels_last(images: torch.Tensor) -> torch.Tensor:
    if images.dtype != torch.uint8:
        raise ValueError(f"images must be uint8, got {images.dtype}")
    if images.ndim != 4:
        raise ValueError(f"images must be [B, H, W, 3], got shape {tuple(images.shape)}")
    return images.permute(0, 2, 3, 1) if images.shape[1] == 3 and images.shape[-1] != 3 else images


def _fitted(h: int, w: int, size: int) -> tuple[int, int, int, int]:
    """Aspect-preserving size inside ``size × size`` and the top / left padding (tf ``resize_with_pad``)."""
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    return rh, rw, (size - rh) // 2, (size - rw) // 2


def resize_with_pad(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` (or ``[B, 3, H, W]``) → uint8 ``[B, size, size, 3]``: PIL bilinear to the
    aspect-preserving size, pasted centred on black, bit-identical to openpi's
    ``openpi_client.image_tools.resize_with_pad`` (tested against the package)."""
    from PIL import Image

    hwc = _channels_last(images)
    h, w = hwc.shape[1:3]
    if (h, w) == (size, size):
        return hwc.contiguous()
    rh, rw, top, left = _fitted(h, w, size)
    out = torch.zeros(hwc.shape[0], size, size, hwc.shape[-1], dtype=torch.uint8)
    for i, frame in enumerate(hwc.cpu().numpy()):
        resized = Image.fromarray(frame).resize((rw, rh), resample=Image.BILINEAR)
        out[i, top : top + rh, left : left + rw] = torch.from_numpy(np.array(resized))
    return out.to(images.device)


def resize_with_pad_lerobot(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` → float ``[B, 3, size, size]`` in [0, 1] as lerobot's π0 / π0.5: bilinear
    ``F.interpolate`` (no antialias) on ``/255`` frames, unrounded, clamped, centred on 0 padding."""
    chw = _channels_last(images).permute(0, 3, 1, 2).float() / 255.0
    h, w = chw.shape[-2:]
    if (h, w) == (size, size):
        return chw
    rh, rw, top, left = _fitted(h, w, size)
    resized = F.interpolate(chw, size=(rh, rw), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    return F.pad(resized, (left, size - rw - left, top, size - rh - top), value=0.0)


def to_model_image(images: torch.Tensor, size: int, resize: ImageResize = "pil") -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` → float32 ``[B, 3, size, size]`` in [-1, 1], resized the checkpoint's way
    (:func:`default_image_resize`)."""
    check_image_resize(resize)
    if resize == "lerobot":
        return resize_with_pad_lerobot(images, size) * 2.0 - 1.0
    return resize_with_pad(images, size).permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0


def camera_slots(
    images: list[torch.Tensor | None],
    num_slots: int,
    size: int,
    batch_size: int | None = None,
    resize: ImageResize = "pil",
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Cameras in openpi's slot order (base, left wrist, right wrist) → (images, masks) of ``num_slots`` slots.

    Args:
        images: uint8 ``[B, H, W, 3]`` per camera, ``None`` for a camera this robot lacks.
        num_slots: slots to return (1..3); cameras beyond it are an error, missing ones are black + mask False.
        size: model resolution (224).
        batch_size: B when every given camera is None.
        resize: ``pil`` (openpi / RLinf) or ``lerobot`` (see :func:`default_image_resize`).
    """
    given = [i for i in images if i is not None]
    if len(images) > num_slots:
        raise ValueError(f"{len(images)} cameras given but the model has {num_slots} image slots")
    bsz = given[0].shape[0] if given else batch_size
    if bsz is None:
        raise ValueError("no camera image given and no batch_size to build empty slots")
    device = given[0].device if given else torch.device("cpu")
    out, masks = [], []
    for slot in range(num_slots):
        img = images[slot] if slot < len(images) else None
        if img is None:  # openpi feeds a black uint8 frame (→ -1) with mask False
            out.append(torch.full((bsz, 3, size, size), -1.0, device=device))
            masks.append(torch.zeros(bsz, dtype=torch.bool, device=device))
        else:
            out.append(to_model_image(img, size, resize))
            masks.append(torch.ones(bsz, dtype=torch.bool, device=device))
    return out, masks


# ---- state / actions --------------------------------------------------------------------------------
def pad_to_dim(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Zero-pad the last axis to ``dim`` (openpi ``PadStatesAndActions``); longer inputs are an error."""
    if x.shape[-1] > dim:
        raise ValueError(f"last dimension {x.shape[-1]} exceeds the model's {dim}")
    return F.pad(x, (0, dim - x.shape[-1]))


def _stat(v: torch.Tensor | None, x: torch.Tensor, name: str) -> torch.Tensor:
    if v is None:
        raise ValueError(f"quantile normalisation (π0.5) needs {name} statistics; the norm stats have none")
    return v.to(device=x.device, dtype=x.dtype)


def normalize(x: torch.Tensor, stats: NormStats, quantile: bool) -> torch.Tensor:
    """openpi ``Normalize`` on ``[..., D]`` (statistics sliced to D):
    z-score ``(x - mean) / (std + 1e-6)`` or quantile ``(x - q01) / (q99 - q01 + 1e-6) · 2 - 1``."""
    d = x.shape[-1]
    if stats.mean.shape[-1] < d:
        raise ValueError(f"norm stats have {stats.mean.shape[-1]} dimensions, the input {d}")
    if quantile:
        q01, q99 = _stat(stats.q01, x, "q01")[:d], _stat(stats.q99, x, "q99")[:d]
        return (x - q01) / (q99 - q01 + EPS) * 2.0 - 1.0
    mean, std = _stat(stats.mean, x, "mean")[:d], _stat(stats.std, x, "std")[:d]
    return (x - mean) / (std + EPS)


def unnormalize(x: torch.Tensor, stats: NormStats, quantile: bool) -> torch.Tensor:
    """openpi ``Unnormalize`` on ``[..., D]``: the inverse of :func:`normalize` on the statistics' dimensions;
    z-score pads mean 0 / std 1, quantile leaves extra dimensions unchanged."""
    d = x.shape[-1]
    if quantile:
        q01, q99 = _stat(stats.q01, x, "q01"), _stat(stats.q99, x, "q99")
        k = min(q01.shape[-1], d)
        head = (x[..., :k] + 1.0) / 2.0 * (q99[:k] - q01[:k] + EPS) + q01[:k]
        return torch.cat([head, x[..., k:]], dim=-1)
    mean = pad_to_dim(_stat(stats.mean, x, "mean")[:d], d)
    std = F.pad(_stat(stats.std, x, "std")[:d], (0, max(0, d - stats.std.shape[-1])), value=1.0)
    return x * (std + EPS) + mean


# ---- prompt -----------------------------------------------------------------------------------------
def find_tokenizer(model_path: str | Path | None = None, tokenizer_path: str | Path | None = None) -> Path:
    """The PaliGemma SentencePiece model: ``tokenizer_path``, else ``<model_path>/paligemma_tokenizer.model``,
    else openpi's cache ``$OPENPI_DATA_HOME/big_vision/paligemma_tokenizer.model`` (default ``~/.cache/openpi``).
    Never downloads."""
    candidates = []
    if tokenizer_path is not None:
        candidates.append(Path(tokenizer_path).expanduser())
    if model_path is not None:
        candidates.append(Path(model_path).expanduser() / TOKENIZER_FILE)
    home = Path(os.environ.get("OPENPI_DATA_HOME", "~/.cache/openpi")).expanduser()
    candidates.append(home / "big_vision" / TOKENIZER_FILE)
    for c in candidates:
        if c.is_file():
            return c
    raise CheckpointError(
        f"PaliGemma tokenizer not found (looked at {', '.join(map(str, candidates))}); copy it next to the "
        f"weights, e.g. `gsutil cp {TOKENIZER_URL} {candidates[-2] if model_path else candidates[0]}`"
    )


def clean_prompt(text: str) -> str:
    """openpi's prompt cleaning: strip, ``_`` and newlines → spaces."""
    return text.strip().replace("_", " ").replace("\n", " ")


def discretize_state(state: torch.Tensor) -> list[int]:
    """Normalised state ``[D]`` → 256-bin indices (``np.digitize`` on ``linspace(-1, 1, 257)[:-1]`` minus 1)."""
    bins = torch.linspace(-1, 1, 257, dtype=torch.float64)[:-1]
    return (torch.bucketize(state.double().cpu(), bins, right=True) - 1).tolist()


class PromptTokenizer:
    """PaliGemma prompt tokenizer (openpi ``PaligemmaTokenizer``) from a local SentencePiece file.

    Args:
        path: ``paligemma_tokenizer.model`` (see :func:`find_tokenizer`).
        max_len: padded length (48 for π0, 200 for π0.5).
    """

    def __init__(self, path: str | Path, max_len: int) -> None:
        import sentencepiece

        self.path = Path(path)
        self.max_len = int(max_len)
        self._warned = False
        self.sp = sentencepiece.SentencePieceProcessor(model_file=str(self.path))

    @property
    def vocab_size(self) -> int:
        return int(self.sp.get_piece_size())

    def encode(self, prompt: str, state: torch.Tensor | None = None) -> list[int]:
        """Unpadded ids: π0 ``bos + clean(prompt) + "\\n"``; with ``state`` (π0.5 discrete state input)
        ``bos + "Task: {prompt}, State: {bins};\\nAction: "``."""
        text = clean_prompt(prompt)
        if state is not None:
            bins = " ".join(map(str, discretize_state(state.reshape(-1))))
            return self.sp.encode(f"Task: {text}, State: {bins};\nAction: ", add_bos=True)
        return self.sp.encode(text, add_bos=True) + self.sp.encode("\n")

    def __call__(self, prompts: list[str], states: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts (and ``[B, D]`` normalised states for the discrete-state format) → ids ``[B, max_len]`` (long,
        padded with 0, truncated) and mask ``[B, max_len]`` (bool)."""
        ids = torch.zeros(len(prompts), self.max_len, dtype=torch.long)
        mask = torch.zeros(len(prompts), self.max_len, dtype=torch.bool)
        for i, prompt in enumerate(prompts):
            row = self.encode(prompt, None if states is None else states[i])
            if len(row) > self.max_len and not self._warned:
                # openpi truncates with a warning too; a cut π0.5 prompt silently loses the task or the state
                self._warned = True
                warnings.warn(
                    f"prompt of {len(row)} tokens truncated to max_token_len={self.max_len} (first: {prompt!r}"
                    f"{', with the discrete state' if states is not None else ''}); the model does not see the rest: "
                    f"raise max_token_len",
                    stacklevel=2,
                )
            row = row[: self.max_len]
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        return ids, mask


__all__ = [
    "IMAGE_RESIZES",
    "ImageResize",
    "PromptTokenizer",
    "TOKENIZER_FILE",
    "camera_slots",
    "check_image_resize",
    "clean_prompt",
    "default_image_resize",
    "discretize_state",
    "find_tokenizer",
    "normalize",
    "pad_to_dim",
    "resize_with_pad",
    "resize_with_pad_lerobot",
    "to_model_image",
    "unnormalize",
]
