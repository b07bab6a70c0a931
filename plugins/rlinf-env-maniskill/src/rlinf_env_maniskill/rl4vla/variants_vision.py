"""The Vision column's texture variants (RLinf v0.3 ``tasks/variants/put_on_plate_25_vision_texture.py`` and
``put_on_plate_25_vision_whole.py``): the green-screened image blended with the overlay's texture photo.

- ``VisionTexture03/05``: inside the bounding box of the robot and object pixels, those pixels are blended with
  the texture (resized to the largest box of the batch, its top-left crop) at ``mix · 0.3`` / ``mix · 0.5``.
- ``VisionWhole03/05``: the whole image is blended with a 640x480 crop of the texture (read at 1280x960) that
  starts at the centre of that box, at the same weights.

Both add the unused ``extra`` digit of upstream's episode ids (1 for train, 16 for test), so the ids of a
test set map to the same scenes as upstream's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from mani_skill.utils.registration import register_env

from rlinf_env_maniskill.rl4vla.scene import OVERLAY_HW, Axis
from rlinf_env_maniskill.rl4vla.tasks import MAX_STEPS, PutOnPlateInScene25MainV3, _by_set


def mask_boxes(mask: torch.Tensor) -> torch.Tensor:
    """``[b, 4]`` (xmin, ymin, xmax, ymax) of the True pixels of each ``[H, W]`` mask; zeros when empty
    (as upstream's ``masks_to_boxes_pytorch``)."""
    boxes = []
    for m in mask:
        where = m.nonzero()
        if len(where) == 0:
            boxes.append(torch.zeros(4, dtype=torch.long, device=mask.device))
        else:
            (ymin, xmin), (ymax, xmax) = where.min(dim=0).values, where.max(dim=0).values
            boxes.append(torch.stack([xmin, ymin, xmax, ymax]))
    return torch.stack(boxes)


class _TextureAxes(PutOnPlateInScene25MainV3):
    mix_ratio = 0.3

    def episode_axes(self):
        axes = super().episode_axes()
        extra = _by_set(self.obj_set, Axis(1, 0), Axis(16, 1), Axis(17, 0))
        return {
            "carrot": Axis(16, 0),
            "extra": extra,
            "plate": axes["plate"],
            "overlay": Axis(16, 0),
            "pos": axes["pos"],
            "quat": axes["quat"],
        }

    def _mix(self, device) -> torch.Tensor:
        return self.overlay_mix.to(device) * self.mix_ratio


@register_env("PutOnPlateInScene25VisionTexture03-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25VisionTexture03(_TextureAxes):
    """Robot and objects re-textured: blended with the texture photo at ``mix · 0.3``."""

    def _green_screen(self, rgb, segmentation):
        kept = self._robot_object_mask(segmentation)
        background = (~kept).to(torch.float32).unsqueeze(-1)
        overlay = self.overlay_images.to(rgb.device)
        boxes = mask_boxes(kept)
        heights = (boxes[:, 3] - boxes[:, 1] + 1).clamp(min=1)
        widths = (boxes[:, 2] - boxes[:, 0] + 1).clamp(min=1)
        texture = F.interpolate(
            self.overlay_textures.to(rgb.device).permute(0, 3, 1, 2).float(),
            size=(int(heights.max()), int(widths.max())),
            mode="bilinear",
            align_corners=False,
        )
        mix = self._mix(rgb.device)
        rgb = rgb.to(torch.float32)
        out = overlay * background
        for i in range(len(rgb)):
            h, w = int(heights[i]), int(widths[i])
            y0, x0 = int(boxes[i, 1]), int(boxes[i, 0])
            region = (i, slice(y0, y0 + h), slice(x0, x0 + w))
            tex = texture[i, :, :h, :w].permute(1, 2, 0)
            inside = kept[region].unsqueeze(-1).to(torch.float32)
            blended = tex * mix[i] + rgb[region] * (1.0 - mix[i])
            out[region] = blended * inside + overlay[region] * (1 - inside)
        return torch.clamp(out, 0, 255).to(torch.uint8)


@register_env("PutOnPlateInScene25VisionTexture05-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25VisionTexture05(PutOnPlateInScene25VisionTexture03):
    """As ``VisionTexture03`` at ``mix · 0.5``."""

    mix_ratio = 0.5


@register_env("PutOnPlateInScene25VisionWhole03-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25VisionWhole03(_TextureAxes):
    """The whole green-screened image blended with a texture crop at ``mix · 0.3``."""

    texture_hw = (2 * OVERLAY_HW[0], 2 * OVERLAY_HW[1])

    def _green_screen(self, rgb, segmentation):
        kept = self._robot_object_mask(segmentation)
        background = (~kept).to(torch.float32).unsqueeze(-1)
        out = self.overlay_images.to(rgb.device) * background + rgb.to(torch.float32) * (1 - background)
        boxes = mask_boxes(kept)
        H, W = OVERLAY_HW
        xc = torch.clamp((boxes[:, 0] + boxes[:, 2]) // 2, min=1, max=W - 1)
        yc = torch.clamp((boxes[:, 1] + boxes[:, 3]) // 2, min=1, max=H - 1)
        textures, mix = self.overlay_textures.to(rgb.device), self._mix(rgb.device)
        for i in range(len(out)):
            crop = textures[i, int(yc[i]) : int(yc[i]) + H, int(xc[i]) : int(xc[i]) + W]
            out[i] = out[i] * (1 - mix[i]) + crop * mix[i]
        return torch.clamp(out, 0, 255).to(torch.uint8)


@register_env("PutOnPlateInScene25VisionWhole05-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25VisionWhole05(PutOnPlateInScene25VisionWhole03):
    """As ``VisionWhole03`` at ``mix · 0.5``."""

    mix_ratio = 0.5
