"""Observation → model inputs: image preprocessing in plain torch and prompt tokenisation."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

PROMPT = "In: What action should the robot take to {task}?\nOut:"


def resize_images(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` → float ``[B, 3, size, size]`` in [0, 255] (bicubic, antialiased, rounded like PIL)."""
    x = images.permute(0, 3, 1, 2).float()
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bicubic", antialias=True, align_corners=False)
        x = x.clamp(0, 255).round()
    return x


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
) -> torch.Tensor:
    """Camera views (each uint8 ``[B, H, W, 3]``) → ``[B, 3·towers·views, size, size]``.

    Per view the channels hold one normalised copy per vision tower (DINOv2, then SigLIP), as
    Prismatic's processor stacks them.
    """
    out = []
    for view in views:
        x = resize_images(view, size)
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
