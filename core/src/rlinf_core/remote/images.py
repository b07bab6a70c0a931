"""Client-side image preparation some servers expect: openpi's clients resize every camera with padding to 224x224
before sending (openpi: examples/libero/main.py:117-122, ``openpi_client.image_tools.resize_with_pad``: PIL
bilinear to fit, centred on black, as TensorFlow's ``resize_with_pad``)."""

from __future__ import annotations

import numpy as np
from PIL import Image


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``uint8 [H, W, 3]`` scaled to fit ``height x width`` (aspect kept, bilinear) and centred on black.

    The sizes are rounded down and the offsets halved as openpi-client 0.1.2 does, so the result is bit-exact to
    ``openpi_client.image_tools.resize_with_pad`` (``tests/core/test_remote_policy.py``). An image already of that
    size is returned as is.
    """
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = Image.fromarray(image).resize((new_w, new_h), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (max(0, int((width - new_w) / 2)), max(0, int((height - new_h) / 2))))
    return np.asarray(canvas)
