"""Observation → model inputs: image preprocessing in plain torch and prompt tokenisation."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

PROMPT = "In: What action should the robot take to {task}?\nOut:"


ImageResize = Literal["tensor", "pil"]
IMAGE_RESIZES = ("tensor", "pil")
# Prismatic's ``image_resize_strategy`` values (openvla/openvla:prismatic/extern/hf/processing_prismatic.py:112-123)
RESIZE_STRATEGIES = ("resize-naive", "resize-crop", "letterbox")


def letterbox_pad(images: torch.Tensor, fill: tuple[int, int, int]) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` padded to square with a symmetric border of colour ``fill``.

    As Prismatic's ``letterbox_pad_transform`` (processing_prismatic.py:23-29): each side gets
    ``int((max(H, W) - side) / 2)``, so an odd difference leaves the image one pixel short of square.
    """
    h, w = images.shape[1:3]
    side = max(h, w)
    pad_w, pad_h = (side - w) // 2, (side - h) // 2
    if not (pad_w or pad_h):
        return images
    out = images.new_empty((images.shape[0], h + 2 * pad_h, w + 2 * pad_w, 3))
    out[...] = torch.tensor(fill, dtype=images.dtype, device=images.device)
    out[:, pad_h : pad_h + h, pad_w : pad_w + w] = images
    return out


def _target_hw(h: int, w: int, size: int, strategy: str) -> tuple[int, int]:
    """Output size of the resize: ``size × size`` (resize-naive) or the shorter side to ``size`` with the aspect
    kept (resize-crop, letterbox), computed as torchvision's ``resize`` does for an int size."""
    if strategy == "resize-naive":
        return size, size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(size * long / short)
    return (new_long, size) if w <= h else (size, new_long)


def _resize_tensor(images: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
    x = images.permute(0, 3, 1, 2).float()
    if tuple(x.shape[-2:]) != hw:
        x = F.interpolate(x, size=hw, mode="bicubic", antialias=True, align_corners=False)
        x = x.clamp(0, 255).round()
    return x


def _resize_pil(images: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
    """Each image through ``PIL.Image.resize(BICUBIC)``, as torchvision's ``resize`` of a PIL image runs it in
    openvla/openvla's Hugging Face processor (two separable passes, 8-bit rounding between)."""
    from PIL import Image

    frames = images.to("cpu", torch.uint8).numpy()
    out = [np.asarray(Image.fromarray(f).resize((hw[1], hw[0]), Image.Resampling.BICUBIC)) for f in frames]
    return torch.from_numpy(np.stack(out)).to(images.device).permute(0, 3, 1, 2).float()


def _center_crop_to(x: torch.Tensor, size: int) -> torch.Tensor:
    """torchvision's ``center_crop`` to ``size × size`` (offsets ``int(round((H - size) / 2))``)."""
    h, w = x.shape[-2:]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return x[..., top : top + size, left : left + size]


def resize_images(
    images: torch.Tensor,
    size: int,
    *,
    mode: ImageResize = "tensor",
    strategy: str = "resize-naive",
    fill: tuple[int, int, int] = (127, 127, 127),
) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` → float ``[B, 3, size, size]`` holding integers in [0, 255].

    ``mode="tensor"``: one antialiased bicubic ``F.interpolate`` of the float tensor, rounded once, which is
    torchvision's ``TVF.resize`` of a tensor as RLinf's rollout calls it
    (RLinf v0.3 rlinf/models/embodiment/prismatic/processing_prismatic.py:51). ``mode="pil"``: ``PIL.Image.resize``
    (bit-exact), as openvla/openvla's Hugging Face processor resizes. (Official OFT's LIBERO eval first takes the
    frames through a JPEG round trip and TF's lanczos3 resize to 224, moojink/openvla-oft
    experiments/robot/openvla_utils.py:520-543, so its processor's PIL step is a no-op; that TF path is not
    reproduced.)
    ``strategy``: the checkpoint's ``image_resize_strategy`` (``letterbox`` pads to square with ``fill`` first;
    ``resize-crop`` / ``letterbox`` resize the shorter side, then centre-crop).
    """
    if mode not in IMAGE_RESIZES:
        raise ValueError(f"image_resize must be one of {IMAGE_RESIZES}, got {mode!r}")
    if strategy not in RESIZE_STRATEGIES:
        raise ValueError(f"image_resize_strategy must be one of {RESIZE_STRATEGIES}, got {strategy!r}")
    if strategy == "letterbox":
        images = letterbox_pad(images, fill)
    hw = _target_hw(images.shape[1], images.shape[2], size, strategy)
    x = _resize_pil(images, hw) if mode == "pil" and tuple(images.shape[1:3]) != hw else _resize_tensor(images, hw)
    return _center_crop_to(x, size) if strategy != "resize-naive" else x


def center_crop(x: torch.Tensor, area: float = 0.9) -> torch.Tensor:
    """OpenVLA-OFT's test-time crop: keep the central ``area`` fraction and resize back (bilinear)."""
    size = x.shape[-1]
    side = max(1, int(round(size * math.sqrt(area))))
    top = (size - side) // 2
    crop = x[..., top : top + side, top : top + side]
    return F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True)


def pixel_values(
    views: list[torch.Tensor],
    size: int,
    means: list[tuple[float, float, float]],
    stds: list[tuple[float, float, float]],
    *,
    crop: bool = False,
    resize: ImageResize = "tensor",
    strategy: str = "resize-naive",
    fill: tuple[int, int, int] = (127, 127, 127),
) -> torch.Tensor:
    """Camera views (each uint8 ``[B, H, W, 3]``) → ``[B, 3·towers·views, size, size]``.

    Per view the channels hold one normalised copy per vision tower (DINOv2, then SigLIP), as
    Prismatic's processor stacks them. ``resize`` / ``strategy`` / ``fill``: see :func:`resize_images`.
    """
    out = []
    for view in views:
        x = resize_images(view, size, mode=resize, strategy=strategy, fill=fill)
        if crop:
            x = center_crop(x)
        x = x / 255.0
        for mean, std in zip(means, stds):
            m = torch.tensor(mean, device=x.device).view(1, 3, 1, 1)
            s = torch.tensor(std, device=x.device).view(1, 3, 1, 1)
            out.append((x - m) / s)
    return torch.cat(out, dim=1)


class PromptEncoder:
    """Tokenises instructions into left-padded ids ``[BOS, PAD…, prompt…, ▁]`` (BOS kept at column 0).

    Special ids come from the tokenizer and config, never hard-coded: BOS from the tokenizer,
    PAD from ``config.json``'s ``pad_token_id``, and the trailing space piece ("▁", 29871 in
    Llama-2) from the tokenizer's vocabulary.

    Args:
        tokenizer: a Hugging Face tokenizer of the checkpoint.
        pad_token_id: id used for left padding.
        max_prompt_length: pad every prompt to this many tokens (None: the longest in the batch).
    """

    def __init__(self, tokenizer, pad_token_id: int, max_prompt_length: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.pad_id = int(pad_token_id)
        bos = tokenizer.bos_token_id
        if bos is None:
            raise ValueError("the checkpoint's tokenizer has no BOS token; OpenVLA prompts start with BOS")
        self.bos_id = int(bos)
        space = tokenizer.convert_tokens_to_ids("▁")
        self.space_id = None if space is None or space == tokenizer.unk_token_id else int(space)
        self.max_prompt_length = max_prompt_length
        self._cache: dict[str, list[int]] = {}
        self._longest_piece: int | None = None

    def check_fits(self, task: str, budget: int) -> None:
        """Raise ``ValueError`` when ``task``'s prompt takes more than ``budget`` tokens (or ``max_prompt_length``);
        a text longer than ``budget`` of the vocabulary's longest pieces is refused without tokenising it."""
        budget = min(budget, self.max_prompt_length or budget)
        text = PROMPT.format(task=task.lower())
        if self._longest_piece is None:
            self._longest_piece = max(map(len, self.tokenizer.get_vocab()), default=1)
        if len(text) > budget * self._longest_piece:
            raise ValueError(
                f"the prompt has {len(task)} characters, more than the {budget} tokens this model's "
                "context leaves for it can hold; shorten the instruction"
            )
        tokens = 2 + len(self.tokenizer(text, add_special_tokens=False)["input_ids"])  # with BOS and the space piece
        if tokens > budget:
            raise ValueError(
                f"the prompt has {tokens} tokens, more than the {budget} this model's context leaves for "
                "it; shorten the instruction"
            )

    def ids(self, task: str) -> list[int]:
        """BOS + prompt tokens + the trailing space piece."""
        if task not in self._cache:
            text = PROMPT.format(task=task.lower())
            ids = [self.bos_id] + list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if self.space_id is not None and ids[-1] != self.space_id:
                ids.append(self.space_id)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[task] = ids
        return self._cache[task]

    def __call__(self, tasks: list[str], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self.ids(t) for t in tasks]
        longest = max(len(r) for r in rows)
        length = self.max_prompt_length or longest
        if longest > length:
            worst = tasks[max(range(len(rows)), key=lambda i: len(rows[i]))]
            raise ValueError(
                f"prompt for {worst!r} has {longest} tokens > max_prompt_length={length}; raise max_prompt_length"
            )
        ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, 0] = r[0]
            mask[i, 0] = 1
            ids[i, length - len(r) + 1 :] = torch.tensor(r[1:], dtype=torch.long)
            mask[i, length - len(r) + 1 :] = 1
        return ids.to(device), mask.to(device)
