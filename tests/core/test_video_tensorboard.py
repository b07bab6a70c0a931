"""The TensorBoard clip (callbacks/video.py's one private-API use) reads back as TensorBoard's own image record."""

import numpy as np
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator
from torch.utils.tensorboard import SummaryWriter

from rlinf_core.callbacks.video import _tensorboard_gif


def test_tensorboard_gif_is_an_animated_image_summary_tensorboard_reads(tmp_path):
    video = np.zeros((3, 8, 12, 3), np.uint8)
    for t in range(3):
        video[t, :, 4 * t : 4 * t + 4] = 255  # a bar that moves: three different frames
    writer = SummaryWriter(str(tmp_path))
    assert _tensorboard_gif(writer, "video/train", video, step=7, fps=5)
    writer.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.IMAGES: 0})
    acc.Reload()
    (record,) = acc.Images("video/train")
    assert (record.step, record.height, record.width) == (7, 8, 12)
    import io

    gif = Image.open(io.BytesIO(record.encoded_image_string))
    assert gif.format == "GIF" and gif.n_frames == 3
    gif.seek(1)
    assert np.asarray(gif.convert("RGB"))[:, 4:8].mean() > 200  # the second frame's bar
